// PM2: `pm2 start deploy/ecosystem.config.js && pm2 save`. Run from the project directory (where .env lives).
// hilo logs every line (its own, uvicorn's, the libraries') to stdout, JSON here: `pm2 logs hilo` shows them
// and they land in PM2's out log (out_file); the error log stays empty unless Python itself cannot start. A daemon
// that cannot start says why in one `daemon.failed` line and exits non-zero (PM2 retries max_restarts times).
// docs/deploy.md walks through it; scripts/check-deploy.sh loads this file with node.
const os = require("os");
const path = require("path");
const root = path.join(__dirname, "..");
// PM2's own log directory (it makes it): `pm2 logs hilo` and log rotation modules find the files there
const logs = path.join(process.env.PM2_HOME || path.join(os.homedir(), ".pm2"), "logs");

module.exports = {
  apps: [
    {
      name: "hilo",
      script: ".venv/bin/hilo",
      args: "serve --host 127.0.0.1 --port 8000",
      interpreter: "none",
      cwd: root,
      autorestart: true,
      max_restarts: 20,
      restart_delay: 3000,
      // hilo drains turns in flight on SIGINT/SIGTERM within HILO_STOP_TIMEOUT (36 s); PM2 kills it after this.
      kill_timeout: 40000,
      out_file: path.join(logs, "hilo-out.log"),
      error_file: path.join(logs, "hilo-error.log"),
      time: false,  // hilo's lines carry their own timestamps
      env: { HILO_LOG_FORMAT: "json", HILO_STOP_TIMEOUT: "36" },
    },
  ],
};
