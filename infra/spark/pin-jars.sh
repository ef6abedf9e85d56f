#!/usr/bin/env bash
# Record the SHA-256 of every JAR in jars.txt that has none yet, after checking the download
# against Maven Central's .sha1. Needs Maven Central (unreachable from the machines that
# wrote sigflow); commit the changed jars.txt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
list=${1:-$here/jars.txt}; work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
repo=${MAVEN_REPO:-https://repo1.maven.org/maven2}
while IFS= read -r line; do
  IFS=: read -r group artifact version sha256 <<<"$line"
  if [[ "$line" == \#* || -z "$group" || -n "$sha256" ]]; then echo "$line"; continue; fi
  path="${group//.//}/${artifact}/${version}/${artifact}-${version}.jar"
  curl -fsSL -o "$work/jar" "$repo/$path"
  echo "$(curl -fsSL "$repo/$path.sha1" | cut -c1-40)  $work/jar" | sha1sum -c - >&2
  echo "$group:$artifact:$version:$(sha256sum "$work/jar" | cut -c1-64)"
done <"$list" >"$work/jars.txt"
mv "$work/jars.txt" "$list"
echo "pinned: $list" >&2
