//! What every HTML page shares: one self-contained document (no network), its style, tables,
//! figures, and a script that tells a headless browser how many plots rendered.

use crate::render::table::Table;

/// The whole page around `body`.
pub(crate) fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}<script>{CHECK}</script>\n</body>\n</html>\n",
        escape(title)
    )
}

pub(crate) const STYLE: &str = "body{font-family:sans-serif;margin:2em;max-width:1200px}\
table{border-collapse:collapse;margin:1em 0;font-size:90%}\
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}\
th{background:#f0f0f0}pre{white-space:pre-wrap;font-size:90%}figure{margin:1em 0}figcaption{color:#555;font-size:90%}img.flame{width:100%}";

/// Counts the plots that rendered (an SVG with a drawn area and marks in it) into
/// `<body data-plots-rendered>`, and once the page has loaded the flame graphs that loaded into
/// `data-flames-loaded`, so a headless browser can check the page.
pub(crate) const CHECK: &str =
    "(function(){var n=0;document.querySelectorAll('figure svg').forEach(function(s){\
var b=s.getBoundingClientRect();var marks=s.querySelectorAll('polyline,rect,line,path').length;\
if(b.width>0&&b.height>0&&marks>2){n++;}});\
document.body.setAttribute('data-plots',String(document.querySelectorAll('figure svg').length));\
document.body.setAttribute('data-plots-rendered',String(n));\
window.addEventListener('load',function(){var f=document.querySelectorAll('img.flame'),m=0;\
f.forEach(function(i){if(i.complete&&i.naturalWidth>0){m++;}});\
document.body.setAttribute('data-flames',String(f.length));\
document.body.setAttribute('data-flames-loaded',String(m));});})();";

pub(crate) fn figure(svg: &str, caption: &str) -> String {
    format!(
        "<figure>{svg}<figcaption>{}</figcaption></figure>\n",
        escape(caption)
    )
}

pub(crate) fn html_table(t: &Table) -> String {
    let mut s = String::from("<table>\n<tr>");
    for h in &t.header {
        s += &format!("<th>{}</th>", escape(h));
    }
    s += "</tr>\n";
    for r in &t.rows {
        s += "<tr>";
        for c in r {
            s += &format!("<td>{}</td>", escape(c));
        }
        s += "</tr>\n";
    }
    s + "</table>\n"
}

pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
