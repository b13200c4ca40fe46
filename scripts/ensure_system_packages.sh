#!/usr/bin/env bash
# Make sure the system tools the deployment tests need exist:
#   promtool (+ prometheus)  from Debian's `prometheus` package
#   kcat                     from Debian's `kcat` package
#   chromium + chromedriver  from Debian's `chromium` and `chromium-driver` (console browser test)
#   wrk                      from Debian's `wrk` (load generator of benchmarks/bench_collector.py)
#   librdkafka.so.1          from Debian's `librdkafka1` (its mock cluster: infra/mock_cluster.py)
#   cJSON and libcurl headers from Debian's `libcjson-dev` and `libcurl4-openssl-dev` (producer/c's
#                            example program ocms-report-c; the C library itself needs only libc)
#   node + npm               from Debian's `nodejs` and `npm` (producer/js, the JavaScript client; a node
#                            already on PATH is kept)
# Idempotent: does nothing when every tool is already on PATH. Otherwise runs
# `apt-get update` once and installs the missing packages non-interactively,
# with sudo only when not running as root. Called by `make test`.
set -euo pipefail

missing=()
# grep reads all of ldconfig's output (no -q): under pipefail an early exit would fail the pipe.
# ldconfig lives in /sbin, which a non-root PATH may lack.
have_rdkafka() { "$(command -v ldconfig || echo /sbin/ldconfig)" -p 2>/dev/null | grep 'librdkafka\.so\.1 ' >/dev/null; }
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
    missing+=(prometheus)
fi
if ! command -v kcat >/dev/null 2>&1; then
    missing+=(kcat)
fi
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
    missing+=(chromium chromium-driver)
fi
if ! command -v wrk >/dev/null 2>&1; then
    missing+=(wrk)
fi
if ! have_rdkafka; then
    missing+=(librdkafka1)
fi
# A header is present when the C compiler finds it (what `make -C producer/c` needs).
has_header() { printf '#include <%s>\n' "$1" | ${CC:-cc} -E -x c - >/dev/null 2>&1; }
if ! has_header cjson/cJSON.h; then
    missing+=(libcjson-dev)
fi
if ! has_header curl/curl.h; then
    missing+=(libcurl4-openssl-dev)
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    missing+=(nodejs npm)
fi

if [ "${#missing[@]}" -eq 0 ]; then
    echo "ensure_system_packages: promtool, prometheus, kcat, chromium, chromedriver, wrk, librdkafka1, cJSON and libcurl headers, node and npm present, nothing to do"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_system_packages: missing ${missing[*]} and no apt-get here; install them by hand" >&2
    exit 1
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo -n)
    else
        echo "ensure_system_packages: missing ${missing[*]}, not root and no sudo" >&2
        exit 1
    fi
fi

echo "ensure_system_packages: installing ${missing[*]} with apt-get"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
# --no-install-recommends keeps the prometheus package from pulling extras.
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"

for tool in promtool prometheus kcat chromium chromedriver wrk node npm; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "ensure_system_packages: $tool still missing after apt-get install" >&2
        exit 1
    fi
done
if ! have_rdkafka; then
    echo "ensure_system_packages: librdkafka.so.1 still missing after apt-get install librdkafka1" >&2
    exit 1
fi
for header in cjson/cJSON.h curl/curl.h; do
    if ! has_header "$header"; then
        echo "ensure_system_packages: <$header> still missing after apt-get install" >&2
        exit 1
    fi
done
echo "ensure_system_packages: $(promtool --version 2>&1 | head -n1); $(kcat -V 2>&1 | grep -m1 -i "version" || echo kcat)"
