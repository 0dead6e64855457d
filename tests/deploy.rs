//! Issue 35: tlsscope on a fleet (deploy/). The Kubernetes Indexed Job and the trace DaemonSet
//! validate against the Kubernetes API's schema offline; the command each pod of the Job runs
//! is run as the manifest says, one process per pod, and merged; the ssh script runs end to end
//! through a local stand-in for ssh; the container image is built where a builder answers, and
//! its definition checked; the Prometheus files pass promtool and their rules read what trace
//! really exports.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::support::{self, text, Netns, Serve};
use crate::trace::one_at_a_time;

const PROMTOOL: &str = "/usr/bin/promtool";
/// Where the image puts tlsscope, and where the manifests run it from.
const IMAGE_BINARY: &str = "/usr/local/bin/tlsscope";
/// The oldest Kubernetes the Job is for (backoffLimitPerIndex is on by default from 1.29), and
/// the newest kubernetes-validate knows.
const KUBERNETES_VERSIONS: [&str; 2] = ["1.29.0", "1.37.0"];

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn deploy_file(name: &str) -> PathBuf {
    support::workspace_path(&format!("deploy/{name}"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The YAML documents of `path`, as JSON values (read by Python's yaml, which
/// kubernetes-validate brings).
fn yaml_documents(path: &Path) -> Vec<Value> {
    let out = support::python(&format!(
        "import json, yaml\nprint(json.dumps(list(yaml.safe_load_all(open({:?})))))",
        path.display().to_string()
    ));
    serde_json::from_slice(&out.stdout).expect("yaml as json")
}

fn job() -> Value {
    let docs = yaml_documents(&deploy_file("bench-job.yaml"));
    assert_eq!(docs.len(), 1, "one Job: {docs:?}");
    docs.into_iter().next().unwrap()
}

fn daemonset() -> Value {
    yaml_documents(&deploy_file("tlsscope-trace-daemonset.yaml"))
        .into_iter()
        .next()
        .unwrap()
}

/// The only container of a workload's pod template.
fn container(workload: &Value) -> &Value {
    let containers = workload["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers");
    assert_eq!(containers.len(), 1, "{containers:?}");
    &containers[0]
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|s| s.as_str().expect("a string").to_string())
        .collect()
}

/// A container's `env` with plain values, in order.
fn container_env(c: &Value) -> Vec<(String, String)> {
    c["env"]
        .as_array()
        .map(|env| {
            env.iter()
                .map(|e| {
                    let value = e["value"]
                        .as_str()
                        .unwrap_or_else(|| panic!("env without a plain value: {e}"));
                    (e["name"].as_str().unwrap().to_string(), value.to_string())
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A string with Kubernetes' variable references expanded as the kubelet does for a
/// container's command, args and env: `$(NAME)` becomes the variable's value when it is
/// defined and stays as written when not; `$$` is one `$`.
fn expand(s: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some((name, tail)) = after
            .strip_prefix('(')
            .and_then(|inner| inner.split_once(')'))
        {
            match env.get(name) {
                Some(value) => out.push_str(value),
                None => out.push_str(&format!("$({name})")),
            }
            rest = tail;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// `python3 -m kubernetes_validate --strict` on `file` against Kubernetes `version`: whether it
/// passed, and what it said. A python3 without the package fails the test: `make deps`
/// installs it.
fn kubernetes_validate(file: &Path, version: &str) -> (bool, String) {
    let out = support::run_with_timeout(
        Command::new("python3")
            .args(["-m", "kubernetes_validate", "--strict", "-k", version])
            .arg(file),
        Duration::from_secs(120),
    );
    let said = text(&out.stdout) + &text(&out.stderr);
    assert!(
        !said.contains("No module named"),
        "kubernetes-validate is not installed for python3 (make deps installs it): {said}"
    );
    (out.status.success(), said)
}

fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_nanos() as u64
}

/// Unix time in ns (whole milliseconds) as RFC 3339 in UTC, by coreutils' date, as the docs
/// and the ssh script make it.
fn rfc3339(unix_ns: u64) -> String {
    let out = support::run_with_timeout(
        Command::new("date").args([
            "-u",
            "-d",
            &format!(
                "@{}.{:03}",
                unix_ns / 1_000_000_000,
                unix_ns / 1_000_000 % 1000
            ),
            "+%Y-%m-%dT%H:%M:%S.%3NZ",
        ]),
        Duration::from_secs(10),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).trim().to_string()
}

fn doc(path: &Path) -> Value {
    serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ops(doc: &Value) -> u64 {
    doc["result"]["ops"].as_u64().expect("result.ops")
}

/// `tlsscope merge FILES --json OUT`.
fn merge(files: &[PathBuf], json: &Path) -> Output {
    support::run_with_timeout(
        Command::new(support::bin())
            .arg("merge")
            .args(files)
            .arg("--json")
            .arg(json),
        Duration::from_secs(60),
    )
}

// Issue 35.
#[test]
fn the_job_and_the_daemonset_validate_against_the_kubernetes_api_schema() {
    for file in ["bench-job.yaml", "tlsscope-trace-daemonset.yaml"] {
        for version in KUBERNETES_VERSIONS {
            let (ok, said) = kubernetes_validate(&deploy_file(file), version);
            assert!(ok, "{file} against Kubernetes {version}: {said}");
            assert!(said.contains("passed"), "{said}");
        }
    }
    // The validator rejects what the API server would: a misspelled field of the Job.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bench-job.yaml");
    let manifest = read(&deploy_file("bench-job.yaml"));
    assert!(manifest.contains("  completionMode: Indexed"));
    std::fs::write(
        &bad,
        manifest.replace("  completionMode: Indexed", "  completionMod: Indexed"),
    )
    .unwrap();
    let (ok, said) = kubernetes_validate(&bad, KUBERNETES_VERSIONS[1]);
    assert!(!ok && said.contains("completionMod"), "{said}");
}

// Issue 35.
#[test]
fn the_job_runs_one_shard_per_node_guaranteed_and_never_retried() {
    let job = job();
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    let n = spec["completions"].as_u64().expect("completions");
    assert_eq!(spec["parallelism"].as_u64(), Some(n), "every shard at once");
    // A failed index is not run again, and does not stop the others: no Job-wide limit.
    assert_eq!(spec["backoffLimitPerIndex"], 0);
    assert!(spec["backoffLimit"].is_null(), "{spec}");
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"], "Never");

    let c = container(&job);
    let env: BTreeMap<String, String> = container_env(c).into_iter().collect();
    assert_eq!(env["SHARDS"], n.to_string(), "SHARDS and completions agree");
    let args = strings(&c["args"]);
    let pairs: Vec<(&str, &str)> = args
        .windows(2)
        .map(|w| (w[0].as_str(), w[1].as_str()))
        .collect();
    for pair in [
        ("--shard", "$(JOB_COMPLETION_INDEX)/$(SHARDS)"),
        ("--start-at", "$(START_AT)"),
        ("--json", "-"),
    ] {
        assert!(pairs.contains(&pair), "{pair:?} in {args:?}");
    }
    assert_eq!(args[0], "bench");

    // Guaranteed QoS: requests equal to limits, for CPU and memory.
    let resources = &c["resources"];
    for what in ["cpu", "memory"] {
        assert!(
            resources["requests"][what].is_string(),
            "{what}: {resources}"
        );
        assert_eq!(
            resources["requests"][what], resources["limits"][what],
            "{what}: {resources}"
        );
    }
    assert_eq!(
        resources["limits"]["cpu"].as_str(),
        env.get("THREADS").map(String::as_str),
        "a load thread per CPU"
    );

    // One shard per node: required anti-affinity on the hostname, for the template's own pods.
    let terms = pod["affinity"]["podAntiAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]
        .as_array()
        .expect("required pod anti-affinity");
    let labels = job["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .unwrap();
    assert!(
        terms.iter().any(|t| {
            t["topologyKey"] == "kubernetes.io/hostname"
                && t["labelSelector"]["matchLabels"]
                    .as_object()
                    .is_some_and(|m| m.iter().all(|(k, v)| labels.get(k) == Some(v)))
        }),
        "{terms:?}"
    );

    // The image's binary, run as the image's user (deploy/Dockerfile).
    assert_eq!(strings(&c["command"]), [IMAGE_BINARY]);
    let dockerfile = read(&deploy_file("Dockerfile"));
    let user = dockerfile
        .lines()
        .filter_map(|l| l.strip_prefix("USER "))
        .next_back()
        .expect("USER");
    let uid = user.split(':').next().unwrap();
    assert_eq!(c["securityContext"]["runAsUser"].to_string(), uid);
    assert_eq!(c["image"], container(&daemonset())["image"], "one image");
}

// Issue 35. Needs `bench --shard` and `merge` (issue 35's other parts).
#[test]
fn each_pod_of_the_job_runs_its_shard_as_written_and_merge_adds_them_up() {
    let serve = Serve::start(&[]);
    let job = job();
    let n = job["spec"]["completions"].as_u64().unwrap();
    let c = container(&job);
    let command = strings(&c["command"]);
    assert_eq!(command, [IMAGE_BINARY]);
    // What applying the Job sets (docs/deploy.md): the time; and the target, here the built-in
    // server, and a short run.
    let start_at_ns = (now_unix_ns() / 1_000_000 + 4000) * 1_000_000;
    let start_at = rfc3339(start_at_ns);
    let overrides = [
        ("TARGET", serve.addr.to_string()),
        ("START_AT", start_at.clone()),
        ("DURATION", "2s".to_string()),
    ];
    let mut env_list = container_env(c);
    for (name, value) in &overrides {
        let slot = env_list
            .iter_mut()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("the Job has no {name}"));
        slot.1 = value.clone();
    }

    // One process per pod, stdout and stderr in one log as the kubelet keeps them, with the
    // container's security context: its user, no privilege escalation, no capabilities, and
    // the root filesystem read-only (in a mount namespace of its own).
    let security = &c["securityContext"];
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(security["readOnlyRootFilesystem"], true);
    let uid = security["runAsUser"]
        .as_u64()
        .expect("runAsUser")
        .to_string();
    let container_runtime = [
        "unshare".to_string(),
        "-m".into(),
        "sh".into(),
        "-c".into(),
        r#"mount -o remount,ro,bind / && exec "$@""#.into(),
        "sh".into(),
        "setpriv".into(),
        format!("--reuid={uid}"),
        format!("--regid={uid}"),
        "--clear-groups".into(),
        "--no-new-privs".into(),
        "--inh-caps=-all".into(),
        "--bounding-set=-all".into(),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut pods = Vec::new();
    for i in 0..n {
        // The control plane sets JOB_COMPLETION_INDEX; the container's env follows, each value
        // expanded with the ones before it.
        let mut env = BTreeMap::from([("JOB_COMPLETION_INDEX".to_string(), i.to_string())]);
        for (name, value) in &env_list {
            let value = expand(value, &env);
            env.insert(name.clone(), value);
        }
        let args: Vec<String> = strings(&c["args"])
            .iter()
            .map(|a| expand(a, &env))
            .collect();
        assert!(args.iter().all(|a| !a.contains("$(")), "{args:?}");
        let log_path = dir.path().join(format!("pod-{i}.log"));
        let log = File::create(&log_path).unwrap();
        let child = Command::new(&container_runtime[0])
            .args(&container_runtime[1..])
            .arg(support::bin())
            .args(&args)
            .env_clear()
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .env("HOME", "/")
            .envs(&env)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start a pod's tlsscope");
        pods.push((child, log_path));
    }
    // Collected as the manifest's header says: the document out of each pod's log, by sed.
    let manifest = read(&deploy_file("bench-job.yaml"));
    let sed_program = manifest
        .split("sed -n '")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .expect("the manifest says how to collect the documents (sed -n '...')");
    let guide = read(&root().join("docs/deploy.md"));
    assert!(
        guide.contains(&format!("sed -n '{sed_program}'")),
        "docs/deploy.md collects the documents as the manifest says"
    );
    let mut files = Vec::new();
    for (i, (mut child, log_path)) in pods.into_iter().enumerate() {
        let status = child.wait().unwrap();
        assert!(status.success(), "pod {i}: {}", read(&log_path));
        let out = support::run_with_timeout(
            Command::new("sed").args(["-n", sed_program]).arg(&log_path),
            Duration::from_secs(10),
        );
        let file = dir.path().join(format!("shard-{i}.json"));
        std::fs::write(&file, &out.stdout).unwrap();
        files.push(file);
    }
    let served = serve.stop();

    let shards: Vec<Value> = files.iter().map(|f| doc(f)).collect();
    let mut connections = 0;
    for (i, shard) in shards.iter().enumerate() {
        let info = &shard["shard"];
        assert_eq!(info["index"], i, "{info}");
        assert_eq!(info["count"], n, "{info}");
        let began = info["window_unix_ns"][0].as_u64().expect("window");
        assert!(
            began.abs_diff(start_at_ns) <= 50_000_000,
            "shard {i}'s window began {} ms from {start_at}",
            (began as f64 - start_at_ns as f64) / 1e6
        );
        connections += info["connections"].as_u64().unwrap();
    }
    let whole: u64 = container_env(c)
        .into_iter()
        .find(|(name, _)| name == "CONNECTIONS")
        .map(|(_, v)| v.parse().unwrap())
        .unwrap();
    assert_eq!(connections, whole, "the shards' connections add up");

    let merged_path = dir.path().join("merged.json");
    let out = merge(&files, &merged_path);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let merged = doc(&merged_path);
    let total: u64 = shards.iter().map(ops).sum();
    assert_eq!(ops(&merged), total);
    assert_eq!(merged["shards"].as_array().map(Vec::len), Some(n as usize));
    let full = served["handshakes"]["full"].as_u64().unwrap();
    assert!(
        full >= total,
        "the server made {full} handshakes, the shards count {total}"
    );
}

/// Hosts on one network: the server's network namespace with a bridge, and one namespace per
/// client host joined to it by a veth pair (10.235.7.0/24, inside these namespaces only).
/// Deleted when dropped.
struct Lan {
    server: Netns,
    hosts: Vec<(String, Netns)>,
}

impl Lan {
    /// The server's address.
    const SERVER: &'static str = "10.235.7.1";

    fn new(hosts: &[&str]) -> Lan {
        let ip = |args: &[&str]| {
            let out =
                support::run_with_timeout(Command::new("ip").args(args), Duration::from_secs(10));
            assert!(out.status.success(), "ip {args:?}: {}", text(&out.stderr));
        };
        let server = Netns::new("dsrv");
        let srv = server.name.as_str();
        ip(&["-n", srv, "link", "add", "br0", "type", "bridge"]);
        ip(&[
            "-n",
            srv,
            "addr",
            "add",
            &format!("{}/24", Lan::SERVER),
            "dev",
            "br0",
        ]);
        ip(&["-n", srv, "link", "set", "br0", "up"]);
        let mut joined = Vec::new();
        for (i, host) in hosts.iter().enumerate() {
            let ns = Netns::new(&format!("d{host}"));
            let port = format!("vb{i}");
            ip(&[
                "-n", srv, "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns",
                &ns.name,
            ]);
            ip(&["-n", srv, "link", "set", &port, "master", "br0", "up"]);
            ip(&[
                "-n",
                &ns.name,
                "addr",
                "add",
                &format!("10.235.7.{}/24", 10 + i),
                "dev",
                "eth0",
            ]);
            ip(&["-n", &ns.name, "link", "set", "eth0", "up"]);
            joined.push((host.to_string(), ns));
        }
        Lan {
            server,
            hosts: joined,
        }
    }

    /// A stand-in for ssh: it runs the command given, as ssh hands it to the remote shell (one
    /// string), in the host's namespace under the host's name (a UTS namespace of its own); it
    /// logs each host and command, and fails as ssh does for a host it does not know.
    fn ssh(&self, dir: &Path) -> (PathBuf, PathBuf) {
        let log = dir.join("ssh.log");
        let ssh = dir.join("ssh");
        let cases: String = self
            .hosts
            .iter()
            .map(|(host, ns)| format!("    {host}) ns={} ;;\n", ns.name))
            .collect();
        std::fs::write(
            &ssh,
            format!(
                "#!/bin/sh\nhost=$1\nshift\nprintf '%s\\t%s\\n' \"$host\" \"$*\" >> '{}'\n\
                 case $host in\n{cases}    *) echo \"ssh: connect to host $host port 22: Connection refused\" >&2; exit 255 ;;\nesac\n\
                 exec ip netns exec \"$ns\" unshare --uts sh -c 'hostname \"$1\" && exec sh -c \"$2\"' sh \"$host\" \"$*\"\n",
                log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&ssh, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        (ssh, log)
    }
}

/// The row of `merged`'s shard table for `file`.
fn shard_row<'a>(merged: &'a Value, file: &Path) -> &'a Value {
    merged["shards"]
        .as_array()
        .expect("shards")
        .iter()
        .find(|row| row["file"].as_str().is_some_and(|f| Path::new(f) == file))
        .unwrap_or_else(|| panic!("no row for {}: {merged:#}", file.display()))
}

fn bench_over_ssh(ssh: &Path, out: &Path, hosts: &[&str], bench: &[&str]) -> Output {
    let bin = support::bin();
    support::run_with_timeout(
        Command::new(deploy_file("bench-over-ssh"))
            .args(["-o", out.to_str().unwrap(), "-l", "3"])
            .args(hosts)
            .arg("--")
            .args(bench)
            .env("SSH", ssh)
            .env("REMOTE_TLSSCOPE", &bin)
            .env("TLSSCOPE", &bin),
        Duration::from_secs(120),
    )
}

// Issue 35. Needs `bench --shard` and `merge` (issue 35's other parts).
#[test]
fn the_ssh_script_runs_a_shard_per_host_and_merges_them_naming_a_host_that_failed() {
    let lan = Lan::new(&["h0", "h1", "h2"]);
    let serve = Serve::start_in(
        &lan.server.prefix(),
        &[],
        &["--listen", &format!("{}:0", Lan::SERVER)],
    );
    let dir = tempfile::tempdir().unwrap();
    let (ssh, log) = lan.ssh(dir.path());
    let target = serve.addr.to_string();
    let bench = [target.as_str(), "-c", "6", "-n", "300"];

    let run = dir.path().join("run");
    let out = bench_over_ssh(&ssh, &run, &["h0", "h1", "h2"], &bench);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Each host ran its own shard, all with the same start.
    let lines: Vec<(String, String)> = read(&log)
        .lines()
        .map(|l| {
            let (host, command) = l.split_once('\t').unwrap();
            (host.to_string(), command.to_string())
        })
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    let starts: Vec<&str> = lines
        .iter()
        .map(|(_, c)| {
            c.split("--start-at ")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
        })
        .collect();
    assert!(starts.iter().all(|s| *s == starts[0]), "{starts:?}");
    let merged = doc(&run.join("merged.json"));
    let mut total = 0;
    for i in 0..3 {
        let host = format!("h{i}");
        assert!(
            lines
                .iter()
                .any(|(h, c)| *h == host && c.contains(&format!("--shard {i}/3 "))),
            "{lines:?}"
        );
        let file = run.join(format!("shard-{i}.json"));
        total += ops(&doc(&file));
        let row = shard_row(&merged, &file);
        assert_eq!(row["status"], "merged", "{row}");
        assert_eq!(row["shard"]["host"], host.as_str(), "{row}");
    }
    assert_eq!(total, 300, "-n divided");
    assert_eq!(ops(&merged), 300);
    assert!(run.join("merged.html").exists());

    // A host that cannot be reached: named, and the others merged; the status says so.
    let run = dir.path().join("run-down");
    let out = bench_over_ssh(&ssh, &run, &["h0", "down", "h2"], &bench);
    let stderr = text(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(3),
        "merge's status for a failed shard: {stderr}"
    );
    assert!(stderr.contains("shard 1/3 on down failed"), "{stderr}");
    let merged = doc(&run.join("merged.json"));
    let failed = shard_row(&merged, &run.join("shard-1.json"));
    assert_eq!(failed["status"], "failed", "{failed}");
    let good: u64 = [0, 2]
        .iter()
        .map(|i| ops(&doc(&run.join(format!("shard-{i}.json")))))
        .sum();
    assert_eq!(ops(&merged), good);
    let full = serve.stop()["handshakes"]["full"].as_u64().unwrap();
    assert!(full >= 300 + good, "{full}");
}

/// The stages of a Dockerfile: (image, name, lines).
fn stages(dockerfile: &str) -> Vec<(String, Option<String>, Vec<String>)> {
    let mut stages: Vec<(String, Option<String>, Vec<String>)> = Vec::new();
    // Continuation lines joined into one instruction.
    let joined = dockerfile.replace("\\\n", " ");
    for line in joined.lines().map(str::trim) {
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if let Some(from) = line.strip_prefix("FROM ") {
            let words: Vec<&str> = from.split_whitespace().collect();
            let name = match words.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => Some(name.to_string()),
                _ => None,
            };
            stages.push((words[0].to_string(), name, Vec::new()));
        } else if let Some(stage) = stages.last_mut() {
            stage.2.push(line.to_string());
        }
    }
    stages
}

/// The Debian package that holds `path` (trying the other side of the merged /usr too).
fn debian_package(path: &str) -> String {
    let other = match path.strip_prefix("/usr") {
        Some(rest) => rest.to_string(),
        None => format!("/usr{path}"),
    };
    for candidate in [path, &other] {
        let out = Command::new("dpkg")
            .args(["-S", candidate])
            .output()
            .unwrap();
        if out.status.success() {
            let said = text(&out.stdout);
            return said.split(':').next().unwrap().trim().to_string();
        }
    }
    panic!("no Debian package holds {path}");
}

/// The container builder that answers here, if any (docker with a daemon, podman, buildah),
/// as its program; else why there is none.
fn builder() -> Result<&'static str, String> {
    let docker = match Command::new("docker").arg("info").output() {
        Ok(out) if out.status.success() => return Ok("docker"),
        Ok(out) => {
            let said = text(&out.stderr);
            let why = said.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            format!("docker has no daemon ({})", why.trim())
        }
        Err(e) => format!("no docker ({e})"),
    };
    for program in ["podman", "buildah"] {
        let on_path = Command::new("sh")
            .args(["-c", &format!("command -v {program}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if on_path {
            return Ok(program);
        }
    }
    Err(format!("{docker}, and there is no podman or buildah"))
}

// Issue 35.
#[test]
fn the_image_definition_ships_the_release_binary_and_the_libraries_it_loads() {
    let dockerfile = read(&deploy_file("Dockerfile"));
    let stages = stages(&dockerfile);
    assert!(stages.len() >= 2, "multi-stage: {stages:?}");
    let (builder_image, builder_name, build) = &stages[0];
    assert!(
        builder_image.starts_with("rust:") && builder_image.ends_with("-bookworm"),
        "a Debian 12 Rust builder: {builder_image}"
    );
    let builder_name = builder_name.as_deref().expect("a named builder stage");
    // The builder's Rust is at least the workspace's.
    let rust_version = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("ARG RUST_VERSION="))
        .expect("ARG RUST_VERSION");
    let cargo_toml = read(&root().join("Cargo.toml"));
    let minimum = cargo_toml
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .unwrap()
        .trim_matches('"');
    let parse = |v: &str| -> Vec<u32> { v.split('.').map(|p| p.parse().unwrap()).collect() };
    assert!(
        parse(rust_version) >= parse(minimum),
        "{rust_version} < {minimum}"
    );
    let build_text = build.join("\n");
    assert!(
        build_text.contains("cargo build --release --locked -p tlsscope"),
        "{build_text}"
    );
    let cli = read(&support::workspace_path("crates/cli/Cargo.toml"));
    assert!(
        cli.contains("[[bin]]\nname = \"tlsscope\""),
        "the tlsscope package builds the tlsscope binary"
    );
    // The programs the probes' build script runs.
    let build_rs = read(&support::workspace_path("crates/probes/build.rs"));
    for program in ["clang", "bpftool"] {
        assert!(build_rs.contains(program));
        assert!(
            build_text.contains(&format!(" {program} ")),
            "{program} in the builder: {build_text}"
        );
    }

    let (runtime_image, _, runtime) = stages.last().unwrap();
    assert_eq!(runtime_image, "debian:bookworm-slim");
    let runtime_text = runtime.join("\n");
    assert!(
        runtime
            .iter()
            .any(|l| l.starts_with(&format!("COPY --from={builder_name} "))
                && l.ends_with(&format!(" {IMAGE_BINARY}"))),
        "{runtime_text}"
    );
    assert!(
        runtime.contains(&format!("ENTRYPOINT [\"{IMAGE_BINARY}\"]")),
        "the DaemonSet's args go to tlsscope: {runtime_text}"
    );
    let user = runtime
        .iter()
        .filter_map(|l| l.strip_prefix("USER "))
        .next_back()
        .expect("USER");
    let uid: u32 = user
        .split(':')
        .next()
        .unwrap()
        .parse()
        .expect("a numeric user");
    assert_ne!(uid, 0);
    // Every library tlsscope links, and the libssl it loads, from a package the runtime stage
    // installs or bookworm-slim has.
    let installed: Vec<&str> = runtime_text
        .split_whitespace()
        .skip_while(|w| *w != "--no-install-recommends")
        .skip(1)
        .take_while(|w| !w.starts_with('&'))
        .collect();
    let ldd = Command::new("ldd").arg(support::bin()).output().unwrap();
    let mut libraries: Vec<String> = text(&ldd.stdout)
        .lines()
        .filter_map(|l| l.split("=> ").nth(1))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    assert!(libraries.len() >= 3, "{}", text(&ldd.stdout));
    libraries.push(support::system_libssl().display().to_string());
    for library in libraries {
        let package = debian_package(&library);
        assert!(
            installed.contains(&package.as_str())
                || ["libc6", "libgcc-s1"].contains(&package.as_str()),
            "{library} is in {package}, which the runtime stage does not install ({installed:?})"
        );
    }
    let ignore = read(&root().join(".dockerignore"));
    for dir in ["target/", ".git/"] {
        assert!(ignore.lines().any(|l| l == dir), "{dir} in .dockerignore");
    }

    match builder() {
        Ok(program) => {
            let tag = format!("tlsscope-deploy-test:{}", support::unique_token());
            let out = support::run_with_timeout(
                Command::new(program)
                    .args([
                        "build",
                        "-f",
                        deploy_file("Dockerfile").to_str().unwrap(),
                        "-t",
                        &tag,
                    ])
                    .arg(root()),
                Duration::from_secs(3600),
            );
            assert!(
                out.status.success(),
                "{program} build: {}",
                text(&out.stderr)
            );
            if program == "buildah" {
                eprintln!("deploy/Dockerfile: built with buildah, not run (no docker or podman)");
                let _ = Command::new(program).args(["rmi", &tag]).output();
                return;
            }
            let run = support::run_with_timeout(
                Command::new(program).args(["run", "--rm", &tag, "--version"]),
                Duration::from_secs(120),
            );
            let _ = Command::new(program).args(["rmi", &tag]).output();
            assert!(run.status.success(), "{}", text(&run.stderr));
            assert!(
                text(&run.stdout).contains("tlsscope"),
                "{}",
                text(&run.stdout)
            );
        }
        Err(why) => eprintln!("deploy/Dockerfile: NOT BUILT: {why}; its structure was checked"),
    }
}

/// Samples of a Prometheus text exposition: name, labels, value.
fn samples(exposition: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => (name, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once("=\"").unwrap();
                    (k.to_string(), v.trim_end_matches('"').to_string())
                })
                .collect();
            (name.to_string(), labels, value.parse().unwrap())
        })
        .collect()
}

/// Prometheus's `histogram_quantile` on cumulative (le, count) buckets: linear within the
/// bucket that holds the rank; the highest finite bound when it falls in +Inf.
fn histogram_quantile(q: f64, mut buckets: Vec<(f64, f64)>) -> f64 {
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(buckets.last().unwrap().0.is_infinite());
    let total = buckets.last().unwrap().1;
    let mut rank = q * total;
    let b = buckets[..buckets.len() - 1]
        .iter()
        .position(|&(_, count)| count >= rank)
        .unwrap_or(buckets.len() - 1);
    if b == buckets.len() - 1 {
        return buckets[b - 1].0;
    }
    let (end, mut count) = buckets[b];
    let mut start = 0.0;
    if b > 0 {
        start = buckets[b - 1].0;
        count -= buckets[b - 1].1;
        rank -= buckets[b - 1].1;
    }
    start + (end - start) * (rank / count)
}

// Issue 35.
#[test]
fn the_fleet_rules_pass_promtool_and_add_up_what_the_daemonsets_trace_exports() {
    let check = |args: &[&str]| {
        let out =
            support::run_with_timeout(Command::new(PROMTOOL).args(args), Duration::from_secs(60));
        let said = text(&out.stdout) + &text(&out.stderr);
        assert!(out.status.success(), "promtool {args:?}: {said}");
        said
    };
    let scrape = deploy_file("prometheus-scrape.yml");
    let rules_file = deploy_file("prometheus-rules.yml");
    let said = check(&["check", "config", scrape.to_str().unwrap()]);
    assert!(
        said.contains("1 rule files found"),
        "the scrape config loads the rules: {said}"
    );
    check(&["check", "rules", rules_file.to_str().unwrap()]);

    // The DaemonSet's trace, as it stands: the node's libssl where the pod sees it under /host,
    // here the machine's own; the metrics on a loopback port of its choosing.
    let daemonset = daemonset();
    let listen = strings(&container(&daemonset)["args"])
        .windows(2)
        .find(|w| w[0] == "--metrics-listen")
        .map(|w| w[1].clone())
        .expect("--metrics-listen");
    let port = listen.rsplit_once(':').unwrap().1;
    // Where the pod serves them is where its annotations send Prometheus.
    assert_eq!(
        daemonset["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"],
        port
    );
    assert_eq!(
        container(&daemonset)["ports"][0]["containerPort"].to_string(),
        port
    );
    let _one = one_at_a_time();
    let args: Vec<String> = strings(&container(&daemonset)["args"])
        .into_iter()
        .map(|a| match a.strip_prefix("/host/") {
            Some(path) => format!("/{path}"),
            None if a.starts_with("0.0.0.0:") => "127.0.0.1:0".to_string(),
            None => a,
        })
        .collect();
    let serve = Serve::start(&[]);
    let mut trace = support::start_until(
        Command::new(support::bin())
            .args(&args)
            .stdout(Stdio::null()),
        "metrics at",
        Duration::from_secs(60),
    );
    let metrics = support::metrics_addr(trace.seen.last().unwrap());
    let bench = support::tlsscope(&["bench", &serve.addr.to_string(), "-n", "200", "-c", "4"]);
    let scraped = support::run_with_timeout(
        Command::new("curl")
            .args(["-sS", "--max-time", "20"])
            .arg(format!("http://{metrics}/metrics")),
        Duration::from_secs(30),
    );
    support::terminate(&mut trace.child);
    let ended = trace.child.wait().unwrap();
    serve.stop();
    assert!(bench.status.success(), "{}", text(&bench.stderr));
    assert!(scraped.status.success(), "{}", text(&scraped.stderr));
    assert!(ended.success(), "{ended}");
    let exposition = text(&scraped.stdout);
    let samples = samples(&exposition);

    // Every metric a rule reads is exported, with every label the rule aggregates by.
    let rules = &yaml_documents(&rules_file)[0]["groups"][0]["rules"];
    let rules = rules.as_array().expect("rules");
    for rule in rules {
        let expr = rule["expr"].as_str().unwrap();
        let metrics: Vec<&str> = expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("tlsscope_"))
            .collect();
        assert!(!metrics.is_empty(), "{expr}");
        let by: Vec<&str> = expr
            .split("by (")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .map(|labels| labels.split(',').map(str::trim).collect())
            .unwrap_or_default();
        for metric in metrics {
            let series: Vec<_> = samples.iter().filter(|(n, ..)| n == metric).collect();
            assert!(
                !series.is_empty(),
                "{metric} (in {expr}) is not exported:\n{exposition}"
            );
            for label in &by {
                assert!(
                    series
                        .iter()
                        .all(|(_, labels, _)| labels.contains_key(*label)),
                    "{metric} lacks the label {label} (in {expr})"
                );
            }
        }
    }

    // The rules evaluated by promtool on that scrape, seen from two hosts: each series rises
    // by its scraped value every minute. The fleet's percentiles are then those of one host's
    // histogram, which the test works out as Prometheus does.
    let fed: Vec<&(String, BTreeMap<String, String>, f64)> = samples
        .iter()
        .filter(|(n, ..)| {
            n == "tlsscope_tls_call_duration_seconds_bucket" || n == "tlsscope_tls_handshakes_total"
        })
        .collect();
    let mut input_series = Vec::new();
    for host in ["host-a:9464", "host-b:9464"] {
        for (name, labels, value) in &fed {
            let mut labels = labels.clone();
            labels.insert("instance".into(), host.into());
            labels.insert("job".into(), "tlsscope".into());
            let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
            input_series.push(json!({
                "series": format!("{name}{{{}}}", labels.join(",")),
                "values": format!("0+{value}x10"),
            }));
        }
    }
    let handshake_buckets: Vec<(f64, f64)> = fed
        .iter()
        .filter(|(n, l, _)| {
            n.ends_with("_bucket")
                && l["function"] == "SSL_do_handshake"
                && l["outcome"] == "success"
        })
        .map(|(_, l, v)| {
            let le = if l["le"] == "+Inf" {
                f64::INFINITY
            } else {
                l["le"].parse().unwrap()
            };
            (le, *v)
        })
        .collect();
    assert!(handshake_buckets.len() > 2, "{exposition}");
    let handshakes = fed
        .iter()
        .find(|(n, l, _)| n == "tlsscope_tls_handshakes_total" && l["outcome"] == "success")
        .map(|(.., v)| *v)
        .expect("handshakes");
    assert!(handshakes >= 201.0, "{exposition}");
    // Near enough: the comparison is PromQL's, for floating point.
    let near = |recorded: &str, selector: &str, expected: f64| {
        json!({
            "expr": format!("abs({recorded}{selector} - {expected:e}) < bool {:e}", expected.abs() * 1e-9),
            "eval_time": "10m",
            "exp_samples": [{"labels": selector, "value": 1}],
        })
    };
    let handshake = r#"{function="SSL_do_handshake",outcome="success"}"#;
    let tests = json!({
        "rule_files": [rules_file],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": input_series,
            "promql_expr_test": [
                near("function_outcome:tlsscope_tls_call_duration_seconds:p50_rate5m", handshake,
                     histogram_quantile(0.5, handshake_buckets.clone())),
                near("function_outcome:tlsscope_tls_call_duration_seconds:p99_rate5m", handshake,
                     histogram_quantile(0.99, handshake_buckets.clone())),
                // Two hosts, each `handshakes` a minute.
                near("outcome:tlsscope_tls_handshakes:rate5m", r#"{outcome="success"}"#,
                     2.0 * handshakes / 60.0),
            ],
        }],
    });
    let dir = tempfile::tempdir().unwrap();
    let test_file = dir.path().join("rules-test.yml");
    std::fs::write(&test_file, serde_json::to_vec_pretty(&tests).unwrap()).unwrap();
    check(&["test", "rules", test_file.to_str().unwrap()]);
}
