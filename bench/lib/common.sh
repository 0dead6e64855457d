# bench/lib/common.sh: shell functions shared by the benchmark scripts in bench/.
#
# Source it after setting BENCH_NAME (used in messages and generated files) and, before calling
# bench_init, the tools' paths if they differ from the defaults. It defines functions and a few
# globals only; nothing runs until the script calls bench_init.
#
# Globals it sets or uses:
#   WORK      private temporary directory (bench_init), removed on exit
#   RUN_DIR   where results go (set by the script; named in the "stopped early" message)
#   STARTED   PIDs of the background processes we started and have not reaped yet
#   SPID/SPORT/SNAME  the running server (start_nginx)
#   SERVER_CPU, LOAD_CPU, CLK_TCK
# shellcheck shell=bash

BENCH_NAME=${BENCH_NAME:-bench}
NGINX=${NGINX:-/usr/sbin/nginx}
BENCH_LIB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

die() { echo "$BENCH_NAME: error: $*" >&2; exit 1; }
note() { echo "$BENCH_NAME: $*" >&2; }

# usage: check_uint VAR... (each must hold a non-negative integer)
check_uint() {
    local v
    for v in "$@"; do
        [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a non-negative integer (got '${!v}')"
    done
}

# usage: need_tools TOOL...
need_tools() {
    local tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null || die "'$tool' not found; run 'make deps'"
    done
}

# --- processes we start, and cleanup on every exit path --------------------------------------
declare -a STARTED=()
WORK=""

track() { STARTED+=("$1"); }
untrack() {
    local keep=() p
    for p in "${STARTED[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
    STARTED=("${keep[@]}")
}
# True while PID exists and is not a zombie.
alive() {
    local st
    st=$(sed -n 's/^.*) \([A-Za-z]\) .*$/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
    [[ -n $st && $st != Z ]]
}
# SIGTERM, up to 10 s grace, then SIGKILL; always reaps. Only ever called with our own PIDs.
stop_pid() {
    local pid=$1 i
    if alive "$pid"; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do alive "$pid" || break; sleep 0.1; done
        if alive "$pid"; then
            note "PID $pid ignored SIGTERM for 10 s; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    wait "$pid" 2>/dev/null || true
    untrack "$pid"
}
# Functions cleanup calls after stopping our processes (e.g. deleting network namespaces).
declare -a CLEANUP_HOOKS=()
cleanup() {
    local rc=$? p
    trap - EXIT INT TERM HUP
    for p in "${STARTED[@]}"; do stop_pid "$p"; done
    for p in "${CLEANUP_HOOKS[@]}"; do "$p" || true; done
    [[ -n $WORK ]] && rm -rf "$WORK"
    ((rc == 0)) || note "stopped early (exit status $rc); partial results, if any, are in ${RUN_DIR:-?}"
    exit "$rc"
}

# Make the private work directory and stop everything we started on any exit.
bench_init() {
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/$BENCH_NAME.XXXXXX")
    trap cleanup EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    CLK_TCK=$(getconf CLK_TCK)
}

# Run a bounded command in the background (so a signal reaches our trap at once) and wait.
# usage: bounded OUTFILE LIMIT_SECONDS CMD...
bounded() {
    local out=$1 limit=$2 pid rc=0
    shift 2
    timeout -k 5 "$limit" "$@" >"$out" 2>&1 &
    pid=$!
    track "$pid"
    wait "$pid" || rc=$?
    untrack "$pid"
    return "$rc"
}

# --- measurement helpers ----------------------------------------------------------------------
# utime+stime (clock ticks, all threads) of a process: fields 14 and 15 of /proc/PID/stat,
# counted after the ")" that ends the command name (which may contain spaces).
proc_ticks() {
    sed 's/^.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'
}
# "busy idle steal" jiffies of one CPU from /proc/stat (idle includes iowait).
cpu_jiffies() {
    awk -v c="cpu$1" '$1 == c { t = 0; for (i = 2; i <= NF; i++) t += $i;
        print t - $5 - $6, $5 + $6, $9 }' /proc/stat
}
# CPU seconds (user+sys) of all reaped children of this shell: the kernel's rusage of children,
# the same utime/stime counters as /proc/PID/stat, kept after the child is reaped. `times` must
# run in this very shell (a $(...) subshell would report its own, empty, children), so:
# snapshot to a file, then parse the file.
children_snapshot() { times >"$WORK/times.$1"; }
children_cpu() {
    awk 'NR == 2 { s = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); sub(/s$/, "", a[2]);
        s += a[1] * 60 + a[2] } printf "%.3f\n", s }' "$WORK/times.$1"
}
now() { echo "$EPOCHREALTIME"; }
# Milliseconds a fixed piece of arithmetic (about 45 ms on a quiet machine here) takes on CPU
# $1, the faster of two tries: how fast this shared VM is right now. Other work inside the VM
# shows in /proc/stat; a slower host (a neighbour, a busy hypervisor) shows only here.
# usage: speed_probe CPU
speed_probe() {
    local t0 t1 best="" ms
    for _ in 1 2; do
        t0=$(now)
        taskset -c "$1" awk 'BEGIN { for (i = 0; i < 1000000; i++) s += i % 7; exit (s < 0) }'
        t1=$(now)
        ms=$(calc "%.1f" "($t1 - $t0) * 1000")
        if [[ -z $best ]] || (($(calc "%d" "$ms < $best"))); then best=$ms; fi
    done
    echo "$best"
}
calc() { awk "BEGIN { v = ($2); printf \"$1\n\", v }"; } # FORMAT EXPR

# --- observers and wrk ------------------------------------------------------------------------
# Stops the observer (tracer, sniffer, profiler) started as $TPID: SIGINT (timeout passes it on),
# up to 40 s to finish and report, then TERM/KILL. Sets TRC to its exit status.
stop_observer() {
    local i
    TRC=0
    kill -INT "$TPID" 2>/dev/null || true
    for ((i = 0; i < 800; i++)); do alive "$TPID" || break; sleep 0.05; done
    if alive "$TPID"; then
        note "observer (PID $TPID) still running 40 s after SIGINT; stopping it"
        stop_pid "$TPID"
        TRC=stopped
    else
        wait "$TPID" || TRC=$?
        untrack "$TPID"
    fi
    TPID="" TRACER_PID=""
}

# What a wrk run's output says: requests done, requests per second, and errors (socket errors
# and non-2xx/3xx responses). usage: wrk_requests|wrk_rate|wrk_errors WRK_OUTPUT
wrk_requests() { sed -n 's/^ *\([0-9][0-9]*\) requests in .*/\1/p' "$1" | head -1; }
wrk_rate() { sed -n 's/^Requests\/sec: *\([0-9.]*\).*/\1/p' "$1" | head -1; }
wrk_errors() {
    awk '/Socket errors:/ { gsub(/,/, ""); e += $4 + $6 + $8 + $10 }
        /Non-2xx or 3xx responses:/ { e += $NF } END { print e + 0 }' "$1"
}

# The order of the variants SEL in round R (sets ORDER): the canonical order rotated one place
# every two rounds, reversed in even rounds. So no variant always runs first or always right
# after another, and with two variants each goes first in half the rounds (rotating one place
# every round and reversing every other would put the same one first every time).
order_for_round() {
    local r=$1 n=${#SEL[@]} i
    local -a rot=()
    for ((i = 0; i < n; i++)); do rot+=("${SEL[(i + (r - 1) / 2) % n]}"); done
    ORDER=()
    if ((r % 2)); then
        ORDER=("${rot[@]}")
    else
        for ((i = n - 1; i >= 0; i--)); do ORDER+=("${rot[i]}"); done
    fi
}

# Pick a free TCP port on 127.0.0.1 (nginx is retried on a bind failure anyway).
free_port() {
    local p i
    for ((i = 0; i < 200; i++)); do
        p=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return 0; fi
    done
    die "no free port found"
}

json_num() { # file key -> first number after "key":
    sed -n "s/.*\"$2\": *\([0-9][0-9]*\).*/\1/p" "$1" | head -1
}

# --- the built-in server ------------------------------------------------------------------------
# Starts `tlsscope serve` on a port the system picks (port 0: no race with another program for
# a port picked beforehand), pinned to SERVER_CPU, and waits until it listens; its output goes
# to OUT_FILE. Sets SPID and SPORT. usage: start_builtin OUT_FILE [SERVE_OPTION...]
start_builtin() {
    local out=$1 i
    shift
    : >"$out" # exists before the background job gets to open it
    taskset -c "$SERVER_CPU" "$TLSSCOPE" serve --listen 127.0.0.1:0 --cpus "$SERVER_CPU" "$@" \
        >"$out" 2>&1 &
    SPID=$!
    track "$SPID"
    SPORT=""
    for ((i = 0; i < 100; i++)); do
        SPORT=$(sed -n 's|^tlsscope serve: listening on https://127\.0\.0\.1:\([0-9]*\) .*|\1|p' "$out")
        [[ -n $SPORT ]] && return 0
        alive "$SPID" || break
        sleep 0.1
    done
    cat "$out" >&2
    die "tlsscope serve did not start"
}

# --- nginx ------------------------------------------------------------------------------------
SPID=""  # PID of the running server
SPORT="" # its port
SNAME="" # its name in the results

# What start_nginx's configuration uses. The defaults are serve-vs-nginx's setup.
NGINX_CERT=""            # default $WORK/cert.pem
NGINX_KEY=""             # default $WORK/key.pem
NGINX_SESSIONS=off       # off: no session cache, no tickets; on: shared cache + tickets
NGINX_LOG_BUFFER=""      # e.g. 64k: buffer the access log (flushed by reopen_nginx_log)
NGINX_DIR=""             # default $WORK/nginx: its pid file, logs, temporary files and html/

# usage: write_nginx_conf CONF PORT [ACCESS_LOG_FILE]
write_nginx_conf() {
    local conf=$1 port=$2 alog=${3:-}
    local access="access_log off;" sessions buf="" dir=${NGINX_DIR:-$WORK/nginx}
    [[ -n $NGINX_LOG_BUFFER ]] && buf=" buffer=$NGINX_LOG_BUFFER"
    [[ -n $alog ]] && access="log_format chk '\$ssl_session_reused \$connection_requests \$ssl_protocol \$status'; access_log $alog chk$buf;"
    case $NGINX_SESSIONS in
        off) sessions="# Every connection must be a full handshake.
        ssl_session_cache off;
        ssl_session_tickets off;" ;;
        on) sessions="# Resumption by session ID (shared cache) and by ticket.
        ssl_session_cache shared:SSL:10m;
        ssl_session_tickets on;" ;;
        *) die "NGINX_SESSIONS must be on or off (got '$NGINX_SESSIONS')" ;;
    esac
    cat >"$conf" <<EOF
# Generated by bench/$BENCH_NAME: one process, no master, foreground.
master_process off;
daemon off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events {
    worker_connections 4096;
}
http {
    $access
    types { text/html html; }
    default_type text/html;
    server_tokens off;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    # Serve the page from a cached descriptor, like tlsscope serves it from memory.
    open_file_cache max=16 inactive=600s;
    open_file_cache_valid 600s;
    client_body_temp_path $dir/tmp/body;
    proxy_temp_path $dir/tmp/proxy;
    fastcgi_temp_path $dir/tmp/fastcgi;
    uwsgi_temp_path $dir/tmp/uwsgi;
    scgi_temp_path $dir/tmp/scgi;
    server {
        listen 127.0.0.1:$port ssl;
        ssl_certificate ${NGINX_CERT:-$WORK/cert.pem};
        ssl_certificate_key ${NGINX_KEY:-$WORK/key.pem};
        ssl_protocols TLSv1.2 TLSv1.3;
        $sessions
        root $dir/html;
        location / { }
    }
}
EOF
}

wait_https() { # port: wait up to 10 s for an HTTPS answer on /
    local i
    for ((i = 0; i < 100; i++)); do
        alive "$SPID" || return 1
        curl -skf --max-time 2 -o /dev/null "https://127.0.0.1:$1/" && return 0
        sleep 0.1
    done
    return 1
}

# usage: start_nginx [ACCESS_LOG_FILE]   (needs $NGINX_DIR/{html,tmp}; sets SPID, SPORT, SNAME)
start_nginx() {
    local try port dir=${NGINX_DIR:-$WORK/nginx}
    local conf="$dir/nginx.conf"
    for try in 1 2 3 4 5; do
        port=$(free_port)
        write_nginx_conf "$conf" "$port" "${1:-}"
        : >"$dir/error.log"
        taskset -c "$SERVER_CPU" "$NGINX" -e "$dir/error.log" -p "$dir/" -c "$conf" \
            >"$dir/stdout.log" 2>&1 &
        SPID=$!
        track "$SPID"
        if wait_https "$port"; then
            SPORT=$port SNAME=nginx
            return 0
        fi
        stop_pid "$SPID"
        grep -q 'Address already in use' "$dir/error.log" "$dir/stdout.log" || break
    done
    cat "$dir/error.log" "$dir/stdout.log" >&2
    die "nginx did not start"
}

# Move nginx's access log to DEST and make nginx write (and flush its buffer) before reopening
# a fresh file: SIGUSR1, which a single-process nginx handles too.
# usage: reopen_nginx_log ACCESS_LOG_FILE DEST
reopen_nginx_log() {
    local log=$1 dest=$2 i
    mv "$log" "$dest"
    kill -USR1 "$SPID"
    for ((i = 0; i < 100; i++)); do
        [[ -e $log ]] && return 0
        alive "$SPID" || break
        sleep 0.05
    done
    die "nginx did not reopen its access log"
}

stop_server() {
    stop_pid "$SPID"
    SPID="" SPORT=""
}

TICKETS_SEEN=""
# openssl s_client twice (TLS 1.2 and 1.3): save the session, offer it back, insist on "New,".
check_no_resumption() {
    local port=$1 label=$2 proto sess o
    for proto in -tls1_2 -tls1_3; do
        sess="$WORK/sess$proto.pem" o="$WORK/s_client.out"
        rm -f "$sess"
        # stdin stays open briefly so that TLS 1.3 tickets, if any were sent, are read and saved.
        sleep 0.5 | timeout 15 openssl s_client -connect "127.0.0.1:$port" "$proto" \
            -sess_out "$sess" >"$o" 2>&1 || true
        grep -q '^New,' "$o" || { cat "$o" >&2; die "$label: s_client $proto did not connect"; }
        # A server may still send TLS 1.3 tickets it can never accept (OpenSSL sends stateful
        # tickets when tickets are off, even with the cache off); the -sess_in test decides.
        TICKETS_SEEN+="$label $proto: $(grep -c 'Post-Handshake New Session Ticket' "$o" || true) ticket(s) received; "
        if [[ -s $sess ]]; then
            sleep 0.5 | timeout 15 openssl s_client -connect "127.0.0.1:$port" "$proto" \
                -sess_in "$sess" >"$o" 2>&1 || true
            grep -q '^Reused,' "$o" && die "$label: resumed a $proto session (must be full handshakes)"
            grep -q '^New,' "$o" || { cat "$o" >&2; die "$label: s_client $proto -sess_in failed"; }
        fi
    done
}

# The TLS parameters a server negotiates with a default s_client (one line, ";"-separated).
# usage: tls_params PORT [S_CLIENT_OPTION...]
tls_params() {
    local port=$1
    shift
    timeout 15 openssl s_client -connect "127.0.0.1:$port" -brief "$@" </dev/null 2>&1 |
        grep -E '^(Protocol version|Ciphersuite|Signature type|Server Temp Key|Negotiated TLS1.3 group)' |
        tr '\n' ';' || true
}

# --- the run's summary and its packing --------------------------------------------------------
# The statistics of a run's CSV, as Markdown on stdout, from the one shared summarizer.
# usage: summarize_run REPORT CSV... [NAME=VALUE]...   (see bench/lib/summarize)
summarize_run() { python3 "$BENCH_LIB/summarize" "$@"; }

# Shrinks the finished RUN_DIR: its Markdown and env.txt stay, the rest goes into raw.tar.xz
# (bench/lib/pack-run, which also drops byte-identical copies). A script calls it last, after
# its summary is written. BENCH_PACK=0 leaves the run as it is (observe-overhead sets it for the
# runs it nests, reads their CSVs, then packs the whole). usage: pack_run [--keep PATH]...
pack_run() {
    if [[ ${BENCH_PACK:-1} == 0 ]]; then
        note "BENCH_PACK=0: $RUN_DIR left unpacked"
        return 0
    fi
    "$BENCH_LIB/pack-run" "$@" "$RUN_DIR" >&2 ||
        note "packing $RUN_DIR failed; its files are all still there (pack it with bench/lib/pack-run)"
}

# Lines of env.txt every script writes. usage: env_common TLSSCOPE_BIN TLSSCOPE_SRC TLSSCOPE_SHA REPO
env_common() {
    echo "date_utc: $(date -u +%Y-%m-%dT%H:%M:%SZ) (started $STAMP)"
    echo "host: $(hostname)"
    echo "kernel: $(uname -a)"
    echo "cpu_model: $(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)"
    echo "nproc: $(nproc)"
    echo "tlsscope: $("$1" --version 2>&1 | head -1) ($2, built $(date -u -r "$2" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || echo '?'), copied at start; sha256 $3...)"
    echo "git_commit: $(git -C "$4" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$4" diff --quiet HEAD -- 2>/dev/null || echo ' (working tree has uncommitted changes)')"
    echo "openssl: $(openssl version)"
    echo "nginx: $("$NGINX" -v 2>&1)"
    echo "wrk: $(wrk -v 2>&1 | head -1)"
}
