#!/bin/bash
# GET throughput of two k3rs release binaries side by side (docs/panic-strategy.md): each
# runs `k3rs server --disable-agent` on loopback with one 1 KiB ConfigMap, `wrk` GETs it
# with a bearer token for 8 s; the binaries alternate over 3 rounds. Prints requests per
# second and the server's CPU microseconds per request. Needs wrk and curl.
# Usage: scripts/release-speed.sh BINARY_A BINARY_B [PORT]
set -eu
a="$1"; b="$2"; port="${3:-16443}"
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 1; }
payload=$(head -c 1024 /dev/zero | tr '\0' x)
for round in 1 2 3; do
    for bin in "$a" "$b"; do
        dir=$(mktemp -d)
        "$bin" server --disable-agent --data-dir "$dir/data" --bind-address 127.0.0.1 \
            --https-listen-port "$port" --token bench --write-kubeconfig "$dir/kc" >"$dir/log" 2>&1 &
        pid=$!
        for _ in $(seq 1 200); do
            curl -skf "https://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break
            sleep 0.1
        done
        curl -skf -H "Authorization: Bearer bench" -H "Content-Type: application/json" \
            -X POST "https://127.0.0.1:$port/api/v1/namespaces/default/configmaps" \
            -d "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"cm1\"},\"data\":{\"k\":\"$payload\"}}" >/dev/null
        # The server's CPU time per request (utime+stime ticks from /proc) is the figure
        # that holds on a loaded machine; requests per second is reported beside it.
        ticks_before=$(awk '{print $14+$15}' "/proc/$pid/stat")
        out=$(wrk -t2 -c16 -d8s -H "Authorization: Bearer bench" \
            "https://127.0.0.1:$port/api/v1/namespaces/default/configmaps/cm1")
        ticks_after=$(awk '{print $14+$15}' "/proc/$pid/stat")
        requests=$(printf '%s\n' "$out" | awk '/requests in/ {print $1}')
        rate=$(printf '%s\n' "$out" | awk '/Requests\/sec/ {print $2}')
        hz=$(getconf CLK_TCK)
        cpu_us=$(awk -v t=$((ticks_after - ticks_before)) -v n="$requests" -v hz="$hz" \
            'BEGIN {printf "%.1f", t * 1000000 / hz / n}')
        echo "round=$round binary=$bin get_per_s=$rate server_cpu_us_per_get=$cpu_us"
        kill "$pid"; wait "$pid" 2>/dev/null || true
        rm -rf "$dir"
    done
done
