#!/usr/bin/env bash
# Copies every shared library `ldd BIN` lists into DIR — the dynamic loader and glibc too, so BIN runs on
# a machine that has none of them, whatever its own glibc: `DIR/ld-linux-x86-64.so.2 --library-path DIR
# BIN ...` (run.sh does this where LIBS names such a folder). A library ldd cannot find is an error.
set -euo pipefail
bin=${1:?usage: bundle-libs.sh BIN DIR}
dir=${2:?usage: bundle-libs.sh BIN DIR}
listing=$(ldd "$bin")
if grep -q 'not found' <<<"$listing"; then
  echo "bundle-libs.sh: $bin needs libraries this machine lacks:" >&2
  grep 'not found' <<<"$listing" >&2
  exit 1
fi
mkdir -p "$dir"
# "libz.so.1 => /lib/.../libz.so.1 (0x...)" names a library; "/lib64/ld-linux-x86-64.so.2 (0x...)" the loader
awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' <<<"$listing" | while read -r lib; do
  cp -L "$lib" "$dir/"
done
