//! A profile in pprof's format (`profile.proto` of github.com/google/pprof), which `go tool
//! pprof` (`-diff_base` too) and speedscope open. Written uncompressed: pprof reads a profile
//! gzipped or not. Encoded here by hand: a handful of messages, varints and length-delimited
//! fields.

use std::collections::HashMap;

use profile::{Frame, Profile};

/// Protocol buffers wire types.
const VARINT: u64 = 0;
const LEN: u64 = 2;

/// A message under construction.
#[derive(Default)]
struct Message(Vec<u8>);

impl Message {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn key(&mut self, field: u64, wire: u64) {
        self.varint(field << 3 | wire);
    }

    /// An integer field (int64 and uint64 alike: every value here is non-negative); zero, the
    /// default, is left out as proto3 does.
    fn int(&mut self, field: u64, v: u64) {
        if v != 0 {
            self.key(field, VARINT);
            self.varint(v);
        }
    }

    fn bytes(&mut self, field: u64, b: &[u8]) {
        self.key(field, LEN);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn message(&mut self, field: u64, m: Message) {
        self.bytes(field, &m.0);
    }

    /// A packed repeated integer field.
    fn packed(&mut self, field: u64, values: impl IntoIterator<Item = u64>) {
        let mut inner = Message::default();
        for v in values {
            inner.varint(v);
        }
        self.bytes(field, &inner.0);
    }
}

/// The string table: index 0 is the empty string, as the format requires.
struct Strings {
    list: Vec<String>,
    index: HashMap<String, u64>,
}

impl Strings {
    fn new() -> Strings {
        Strings {
            list: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }

    fn of(&mut self, s: &str) -> u64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.list.len() as u64;
        self.list.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

fn value_type(strings: &mut Strings, kind: &str, unit: &str) -> Message {
    let mut m = Message::default();
    m.int(1, strings.of(kind));
    m.int(2, strings.of(unit));
    m
}

/// The profile as pprof's protobuf: two values per sample, its count and its CPU time in
/// nanoseconds; one function and one location per distinct frame, named `function` with the
/// object as the file name (so `-diff_base` lines up versions as the folded stacks do); the
/// `comments` (the environment) as pprof's comments, which `go tool pprof -comments` prints.
pub fn encode(p: &Profile, frequency_hz: u32, comments: &[String]) -> Vec<u8> {
    let mut strings = Strings::new();
    let mut out = Message::default();
    out.message(1, value_type(&mut strings, "samples", "count"));
    out.message(1, value_type(&mut strings, "cpu", "nanoseconds"));

    let mut ids: HashMap<&Frame, u64> = HashMap::new();
    let mut order: Vec<&Frame> = Vec::new();
    for s in &p.stacks {
        let mut sample = Message::default();
        let locations: Vec<u64> = s
            .frames
            .iter()
            .map(|f| {
                let next = ids.len() as u64 + 1;
                *ids.entry(f).or_insert_with(|| {
                    order.push(f);
                    next
                })
            })
            .collect();
        // Leaf first, as the format has it.
        sample.packed(1, locations);
        sample.packed(2, [1, s.weight_ns]);
        out.message(2, sample);
    }
    for id in 1..=order.len() as u64 {
        let mut line = Message::default();
        line.int(1, id);
        let mut location = Message::default();
        location.int(1, id);
        location.message(4, line);
        out.message(4, location);
    }
    for (i, f) in order.iter().enumerate() {
        // pprof adds functions up by name: an unnamed one keeps its object in its name.
        let name = match &f.function {
            Some(name) => strings.of(name),
            None => strings.of(&format!("[unknown in {}]", f.object)),
        };
        let mut function = Message::default();
        function.int(1, i as u64 + 1);
        function.int(2, name);
        function.int(3, name);
        function.int(4, strings.of(&f.object));
        out.message(5, function);
    }
    let period_type = value_type(&mut strings, "cpu", "nanoseconds");
    let comments: Vec<u64> = comments.iter().map(|c| strings.of(c)).collect();
    for s in &strings.list {
        out.bytes(6, s.as_bytes());
    }
    if let Some((first, last)) = p.span {
        out.int(10, ((last - first) * 1e9) as u64);
    }
    out.message(11, period_type);
    out.int(12, 1_000_000_000 / u64::from(frequency_hz.max(1)));
    if !comments.is_empty() {
        out.packed(13, comments);
    }
    out.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use profile::Stack;

    /// Reads a message's fields back: (field, wire type, integer or bytes).
    fn fields(mut b: &[u8]) -> Vec<(u64, u64, u64, Vec<u8>)> {
        fn varint(b: &mut &[u8]) -> u64 {
            let (mut v, mut shift) = (0u64, 0);
            loop {
                let byte = b[0];
                *b = &b[1..];
                v |= u64::from(byte & 0x7f) << shift;
                if byte < 0x80 {
                    return v;
                }
                shift += 7;
            }
        }
        let mut out = Vec::new();
        while !b.is_empty() {
            let key = varint(&mut b);
            match key & 7 {
                0 => out.push((key >> 3, 0, varint(&mut b), Vec::new())),
                2 => {
                    let n = varint(&mut b) as usize;
                    out.push((key >> 3, 2, 0, b[..n].to_vec()));
                    b = &b[n..];
                }
                w => panic!("wire type {w}"),
            }
        }
        out
    }

    #[test]
    fn samples_locations_functions_and_strings_are_encoded_as_pprof_reads_them() {
        let f = |name: &str, object: &str| Frame {
            function: Some(name.into()),
            object: object.into(),
        };
        let p = Profile {
            stacks: vec![Stack {
                pid: 1,
                tid: 1,
                frames: vec![f("leaf", "libcrypto"), f("main", "app")],
                sites: Vec::new(),
                weight_ns: 300,
            }],
            lost_chunks: 0,
            span: Some((1.0, 3.0)),
            restored_frames: 0,
        };
        let top = fields(&encode(&p, 1000, &["kernel 6.18".to_string()]));
        let strings: Vec<String> = top
            .iter()
            .filter(|x| x.0 == 6)
            .map(|x| String::from_utf8(x.3.clone()).unwrap())
            .collect();
        assert_eq!(strings[0], "");
        for s in [
            "samples",
            "count",
            "cpu",
            "nanoseconds",
            "leaf",
            "main",
            "libcrypto",
            "app",
        ] {
            assert!(strings.contains(&s.to_string()), "{s}: {strings:?}");
        }
        let sample = top.iter().find(|x| x.0 == 2).unwrap();
        let sample = fields(&sample.3);
        // location ids, leaf first; then count 1 and 300 ns.
        assert_eq!(sample[0].3, vec![1, 2]);
        assert_eq!(sample[1].3, vec![1, 0xac, 0x02]);
        let functions: Vec<_> = top.iter().filter(|x| x.0 == 5).collect();
        assert_eq!(functions.len(), 2);
        let leaf = fields(&functions[0].3);
        assert_eq!(leaf[0], (1, 0, 1, Vec::new()));
        assert_eq!(strings[leaf[1].2 as usize], "leaf");
        assert_eq!(strings[leaf[3].2 as usize], "libcrypto");
        assert!(
            top.contains(&(10, 0, 2_000_000_000, Vec::new())),
            "duration"
        );
        assert!(top.contains(&(12, 0, 1_000_000, Vec::new())), "period");
        let comment = top.iter().find(|x| x.0 == 13).unwrap();
        assert_eq!(strings[comment.3[0] as usize], "kernel 6.18");
    }
}
