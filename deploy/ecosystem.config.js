// PM2: `pm2 start deploy/ecosystem.config.js && pm2 save`. Run from the project directory (where .env lives).
// hilo logs every line (its own, uvicorn's, the libraries') to stdout, JSON here: `pm2 logs hilo` shows them
// and they land in PM2's out log; the error log stays empty unless Python itself cannot start. A daemon that
// cannot start says why in one `daemon.failed` line and exits non-zero (PM2 retries max_restarts times).
module.exports = {
  apps: [
    {
      name: "hilo",
      script: ".venv/bin/hilo",
      args: "serve --host 127.0.0.1 --port 8000",
      interpreter: "none",
      cwd: __dirname + "/..",
      autorestart: true,
      max_restarts: 20,
      restart_delay: 3000,
      // hilo drains turns in flight on SIGINT/SIGTERM; give it time before PM2 kills it.
      kill_timeout: 40000,
      env: { HILO_LOG_FORMAT: "json" },
    },
  ],
};
