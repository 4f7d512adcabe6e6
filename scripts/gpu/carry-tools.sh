#!/usr/bin/env bash
# perf and strace from this machine (amd64), each with every library it loads and the loader itself,
# packed into FILE (xz; about 9 MiB, where the directory is 35), for a GPU machine that has
# neither (gpu-thread-syscalls and coordinator-profile need them). Its bin/perf and bin/strace
# start the copied program through the copied loader, so the GPU machine's own C library does
# not matter. quick-set.sh unpacks it (TOOLS=FILE); by hand, unpack it and set PERF and STRACE
# to its bin/perf and bin/strace.
#   scripts/gpu/carry-tools.sh target/gpucheck/tools.tar.xz
set -euo pipefail
file=${1:?usage: scripts/gpu/carry-tools.sh FILE.tar.xz}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/bin" "$dir/lib"
for tool in perf strace; do
  path=$(command -v "$tool") || {
    echo "carry-tools: no $tool on this machine: install it first (Debian: linux-perf, strace)" >&2
    exit 1
  }
  cp -L "$path" "$dir/lib/$tool.real"
  # Every library ldd resolves, and the loader (the line without "=>").
  ldd "$path" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\/.*ld-linux/ { print $1 }' |
    while read -r lib; do cp -L "$lib" "$dir/lib/"; done
  cat > "$dir/bin/$tool" <<WRAP
#!/bin/sh
lib=\$(dirname "\$(readlink -f "\$0")")/../lib
exec "\$lib/ld-linux-x86-64.so.2" --library-path "\$lib" "\$lib/$tool.real" "\$@"
WRAP
  chmod +x "$dir/bin/$tool"
done
"$dir/bin/perf" --version
"$dir/bin/strace" -V | head -1
tar cJf "$file" -C "$dir" .
du -h "$file"
