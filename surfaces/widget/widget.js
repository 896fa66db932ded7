/*! hilo web widget 1.0.2 | plain JavaScript, no build step | served by `hilo serve` at /widget.js
 *
 * Embed:  <script src="https://HOST/widget.js" defer></script>
 * Options (data- attributes on that tag): data-title, data-lang (en|es), data-position (right|left),
 * data-greeting, data-accent (a CSS colour), data-open (true), data-stream (false: no streaming),
 * data-site-token (a user token signed by the site's backend), data-token-provider (the name of a global
 * function returning a site token, or a promise of one), data-api (API base; default: where this file came from).
 * JS API: window.hilo.open() / close() / toggle() / newConversation() / setUserToken(token | null).
 * Events on window: hilo:open, hilo:close, hilo:delta {text}, hilo:done {status, conversation_id}, hilo:error.
 *
 * Everything a person or the server wrote is put in the page with textContent, never as HTML.
 */
(function () {
  "use strict";

  var VERSION = "1.1.0";
  if (window.hilo && window.hilo.version) return; // embedded twice: the first one wins

  var TEXT = {
    en: {
      title: "Chat", open: "Open chat", close: "Close chat", newConversation: "New conversation",
      conversations: "Your conversations", message: "Message", placeholder: "Write a message…", send: "Send",
      typing: "{title} is typing…", retry: "Retry", dismiss: "Dismiss", you: "You", untitled: "Conversation",
      greeting: "Hi! How can I help you today?", loading: "Loading…", messages: "Messages",
      network: "Could not reach the chat service. Check your connection and try again.",
      memories: "What I remember",
    },
    es: {
      title: "Chat", open: "Abrir el chat", close: "Cerrar el chat", newConversation: "Nueva conversación",
      conversations: "Tus conversaciones", message: "Mensaje", placeholder: "Escribe un mensaje…", send: "Enviar",
      typing: "{title} está escribiendo…", retry: "Reintentar", dismiss: "Cerrar aviso", you: "Tú",
      untitled: "Conversación", greeting: "¡Hola! ¿En qué puedo ayudarte?", loading: "Cargando…",
      messages: "Mensajes",
      network: "No se ha podido conectar con el chat. Comprueba tu conexión y vuelve a intentarlo.",
      memories: "Lo que recuerdo",
    },
  };

  // ---- options, from the tag that loaded this file ----------------------------------------------------
  var script = document.currentScript ||
    document.querySelector('script[src*="/widget.js"]') || document.createElement("script");
  var data = script.dataset || {};
  var src = new URL(script.src || location.href, location.href);
  var API = (data.api || (src.origin + src.pathname.replace(/\/widget\.js$/, ""))).replace(/\/+$/, "");
  var LANG = pickLang(data.lang || document.documentElement.lang || navigator.language);
  var T = TEXT[LANG];
  var TITLE = data.title || T.title;
  var STREAM = data.stream !== "false" && typeof ReadableStream !== "undefined" && typeof TextDecoder !== "undefined";

  function pickLang(tag) {
    var primary = String(tag || "").toLowerCase().split(/[-_]/)[0];
    return TEXT[primary] ? primary : "en";
  }

  // ---- storage that survives a browser refusing it (private modes, blocked third-party storage) -------
  var memory = {};
  function storage(kind) {
    try { var s = window[kind]; s.setItem("hilo:probe", "1"); s.removeItem("hilo:probe"); return s; } catch (e) {
      return { getItem: function (k) { return k in memory ? memory[k] : null; },
               setItem: function (k, v) { memory[k] = String(v); }, removeItem: function (k) { delete memory[k]; } };
    }
  }
  var local = storage("localStorage");
  var session = storage("sessionStorage");
  var KEY = "hilo:" + API + ":";

  // ---- identity: a site user token when the site gives one, else the anonymous visitor token -----------
  var userToken; // undefined: not set through the JS API
  async function siteToken() {
    if (userToken !== undefined) return userToken;
    var provider = data.tokenProvider && window[data.tokenProvider];
    if (typeof provider === "function") {
      try { return (await provider()) || null; } catch (e) { return null; }
    }
    return data.siteToken || null;
  }

  async function credentials() {
    var site = await siteToken();
    return site ? { kind: "site", token: site } : { kind: "visitor", token: local.getItem(KEY + "session") };
  }

  // ---- the API ------------------------------------------------------------------------------------------
  function ApiError(status, body) {
    this.status = status;
    this.key = (body && body.error) || "network";
    this.message = (body && body.message) || T.network;
    this.retryAfter = body && body.retry_after;
  }

  async function call(method, path, body, accept) {
    for (var attempt = 0; attempt < 2; attempt++) {
      var who = await credentials();
      var headers = { "accept": accept || "application/json", "accept-language": LANG };
      if (body) headers["content-type"] = "application/json";
      if (who.token) headers["authorization"] = "Bearer " + who.token;
      var res;
      try {
        // Bearer token only, never cookies: the API refuses pages on origins it does not know.
        res = await fetch(API + path, { method: method, headers: headers, credentials: "omit", mode: "cors",
                                        body: body ? JSON.stringify(body) : undefined });
      } catch (e) {
        throw new ApiError(0, null);
      }
      if (res.status === 401 && attempt === 0 && who.kind === "visitor" && who.token) {
        local.removeItem(KEY + "session"); // a token this server no longer accepts: start over as a new visitor
        continue;
      }
      if (res.status === 401 && attempt === 0 && who.kind === "site" && data.tokenProvider) continue;
      if (!res.ok) {
        var payload = null;
        try { payload = await res.json(); } catch (e) { /* not JSON */ }
        throw new ApiError(res.status, payload);
      }
      return res;
    }
    throw new ApiError(401, null);
  }

  // A new visitor's token, or a renewed one: the server hands back a fresh token once the one sent is getting
  // old (HILO_SESSION_MAX_AGE), for the same visitor, on any call (reads too, in the body's `session`). An
  // expired one is answered 401 (see call()).
  function timeZone() {
    // The browser's IANA time zone ("Europe/Madrid"), or nothing where it cannot say.
    try { return Intl.DateTimeFormat().resolvedOptions().timeZone || null; } catch (e) { return null; }
  }

  function keepSession(token) {
    if (token) local.setItem(KEY + "session", token);
  }

  // ---- DOM helpers: text only -----------------------------------------------------------------------------
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (name) {
      if (name === "text") node.textContent = attrs[name];
      else node.setAttribute(name, attrs[name]);
    });
    (children || []).forEach(function (child) { node.appendChild(child); });
    return node;
  }

  function icon(path) {
    var ns = "http://www.w3.org/2000/svg";
    var svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", "0 0 24 24");
    svg.setAttribute("aria-hidden", "true");
    svg.setAttribute("focusable", "false");
    var p = document.createElementNS(ns, "path");
    p.setAttribute("d", path);
    svg.appendChild(p);
    return svg;
  }

  var ICON_CHAT = "M4 4h16a2 2 0 0 1 2 2v10a2 2 0 0 1-2 2H9l-5 4v-4H4a2 2 0 0 1-2-2V6a2 2 0 0 1 2-2z";
  var ICON_CLOSE = "M6.4 5 12 10.6 17.6 5 19 6.4 13.4 12 19 17.6 17.6 19 12 13.4 6.4 19 5 17.6 10.6 12 5 6.4z";
  var ICON_PLUS = "M11 5h2v6h6v2h-6v6h-2v-6H5v-2h6z";
  var ICON_DOWN = "M7.4 8.6 12 13.2l4.6-4.6L18 10l-6 6-6-6z";
  var ICON_SEND = "M3 20.5v-7l9-1.5-9-1.5v-7L22 12z";
  var ICON_MEMORY = "M12 2a7 7 0 0 0-4 12.7V17a1 1 0 0 0 1 1h6a1 1 0 0 0 1-1v-2.3A7 7 0 0 0 12 2zM9 20h6v2H9z";

  var STYLE = [
    ":host{all:initial}",
    ".root{--accent:#4f46e5;--on-accent:#fff;--bg:#fff;--fg:#1c1c21;--muted:#5f6170;--line:#e3e4ea;",
    "--bot:#f1f2f6;--danger:#b42318;--danger-bg:#fef3f2;--shadow:0 12px 40px rgba(15,20,40,.22);",
    "font:15px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:var(--fg);color-scheme:light}",
    "@media (prefers-color-scheme:dark){.root{--bg:#1c1d22;--fg:#ececf1;--muted:#a5a7b4;--line:#33353d;",
    "--bot:#2a2c33;--danger:#ffb4ab;--danger-bg:#3b1d1a;--shadow:0 12px 40px rgba(0,0,0,.6);color-scheme:dark}}",
    "*{box-sizing:border-box}",
    "button,select,textarea{font:inherit;color:inherit}",
    ".sr-only{position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}",
    "svg{width:22px;height:22px;fill:currentColor}",
    ".launcher{position:fixed;bottom:20px;right:20px;z-index:2147483000;width:56px;height:56px;border:0;",
    "border-radius:50%;background:var(--accent);color:var(--on-accent);box-shadow:var(--shadow);cursor:pointer;",
    "display:grid;place-items:center}",
    ".launcher svg{width:26px;height:26px}",
    ".left .launcher{right:auto;left:20px}",
    ".panel{position:fixed;bottom:88px;right:20px;z-index:2147483000;width:380px;height:min(600px,calc(100vh - 108px));",
    "display:flex;flex-direction:column;background:var(--bg);border:1px solid var(--line);border-radius:16px;",
    "box-shadow:var(--shadow);overflow:hidden}",
    ".left .panel{right:auto;left:20px}",
    ".panel[hidden]{display:none}",
    "header{display:flex;align-items:center;gap:4px;padding:10px 8px 10px 16px;background:var(--accent);",
    "color:var(--on-accent)}",
    "h2{flex:1;margin:0;font-size:16px;font-weight:600;overflow:hidden;text-overflow:ellipsis;white-space:nowrap}",
    ".icon{width:36px;height:36px;border:0;border-radius:8px;background:transparent;cursor:pointer;",
    "display:grid;place-items:center;color:inherit}",
    ".icon:hover{background:rgba(255,255,255,.16)}",
    ".bar{padding:8px 12px;border-bottom:1px solid var(--line)}",
    "select{width:100%;padding:6px 8px;border:1px solid var(--line);border-radius:8px;background:var(--bg)}",
    ".log{flex:1;overflow-y:auto;padding:14px 12px;display:flex;flex-direction:column;gap:8px}",
    ".log[hidden],.memories[hidden]{display:none}",
    ".memories{flex:1;overflow-y:auto;padding:14px 12px}",
    ".memories h3{margin:0 0 10px;font-size:15px;font-weight:600}",
    ".memories ul{list-style:none;margin:0;padding:0;display:flex;flex-direction:column;gap:6px}",
    ".memories li{display:flex;align-items:center;gap:8px;padding:8px 10px;border-radius:10px;background:var(--bot)}",
    ".memories li span{flex:1;overflow-wrap:anywhere}",
    ".memories .forget{border:1px solid var(--line);border-radius:8px;background:var(--bg);padding:3px 10px;cursor:pointer}",
    ".memories p{margin:8px 0;color:var(--muted)}",
    ".icon[aria-pressed=true]{background:rgba(255,255,255,.24)}",
    ".msg{display:flex}",
    ".msg.user{justify-content:flex-end}",
    ".bubble{max-width:85%;padding:8px 12px;border-radius:14px;white-space:pre-wrap;overflow-wrap:anywhere}",
    ".user .bubble{background:var(--accent);color:var(--on-accent);border-bottom-right-radius:4px}",
    ".assistant .bubble{background:var(--bot);border-bottom-left-radius:4px}",
    ".notice .bubble{background:transparent;color:var(--muted);max-width:100%;padding:4px 2px}",
    ".unsent .bubble{opacity:.6}",
    ".dots{display:inline-flex;gap:4px;padding:4px 0}",
    ".dots i{width:7px;height:7px;border-radius:50%;background:var(--muted);animation:blink 1.2s infinite both}",
    ".dots i:nth-child(2){animation-delay:.2s}.dots i:nth-child(3){animation-delay:.4s}",
    "@keyframes blink{0%,80%,100%{opacity:.25}40%{opacity:1}}",
    "@media (prefers-reduced-motion:reduce){.dots i{animation:none;opacity:.6}}",
    ".status{min-height:18px;padding:0 14px;font-size:12px;color:var(--muted)}",
    ".error{display:flex;align-items:center;gap:8px;margin:0 12px 8px;padding:8px 10px;border-radius:10px;",
    "background:var(--danger-bg);color:var(--danger);font-size:14px}",
    ".error[hidden]{display:none}",
    ".error span{flex:1}",
    ".error button{border:1px solid currentColor;border-radius:8px;background:transparent;padding:4px 10px;cursor:pointer}",
    ".error button[hidden]{display:none}",
    "form{display:flex;align-items:flex-end;gap:8px;padding:10px 12px;border-top:1px solid var(--line)}",
    "textarea{flex:1;resize:none;max-height:120px;min-height:40px;padding:9px 12px;border:1px solid var(--line);",
    "border-radius:12px;background:var(--bg)}",
    ".send{width:40px;height:40px;border:0;border-radius:12px;background:var(--accent);color:var(--on-accent);",
    "cursor:pointer;display:grid;place-items:center}",
    ".send:disabled,.icon:disabled{opacity:.5;cursor:default}",
    ":focus-visible{outline:3px solid var(--accent);outline-offset:2px}",
    "header :focus-visible,.launcher:focus-visible{outline-color:var(--fg)}",
    "@media (max-width:480px){.panel{inset:0;width:100%;height:100%;border-radius:0;border:0}",
    ".open .launcher{display:none}}",
  ].join("");

  // ---- the UI ---------------------------------------------------------------------------------------------
  var host = document.createElement("hilo-widget");
  var shadow = host.attachShadow({ mode: "open" });
  if (shadow.adoptedStyleSheets !== undefined && typeof CSSStyleSheet === "function" && CSSStyleSheet.prototype.replaceSync) {
    var sheet = new CSSStyleSheet(); // not an inline <style>: works under a strict Content-Security-Policy
    sheet.replaceSync(STYLE);
    shadow.adoptedStyleSheets = [sheet];
  } else {
    shadow.appendChild(el("style", { text: STYLE }));
  }

  var launcher = el("button", { "class": "launcher", type: "button", "aria-label": T.open,
                                "aria-expanded": "false", "aria-controls": "hilo-panel" }, [icon(ICON_CHAT)]);
  var newButton = el("button", { "class": "icon new", type: "button", "aria-label": T.newConversation,
                                 title: T.newConversation }, [icon(ICON_PLUS)]);
  var memoryButton = el("button", { "class": "icon memory", type: "button", "aria-label": T.memories,
                                    title: T.memories, "aria-pressed": "false", "aria-controls": "hilo-memories" },
                        [icon(ICON_MEMORY)]);
  var memoryView = el("div", { "class": "memories", id: "hilo-memories", "aria-live": "polite", hidden: "" });
  var closeButton = el("button", { "class": "icon close", type: "button", "aria-label": T.close, title: T.close },
                       [icon(ICON_CLOSE)]);
  var select = el("select", { id: "hilo-conversations", "class": "conversations" });
  var log = el("div", { "class": "log", role: "log", "aria-live": "polite", "aria-label": T.messages, tabindex: "0" });
  var status = el("div", { "class": "status", "aria-live": "polite" });
  var errorText = el("span");
  var retryButton = el("button", { type: "button", "class": "retry", text: T.retry });
  var dismissButton = el("button", { type: "button", "class": "dismiss", "aria-label": T.dismiss, text: "×" });
  var errorBox = el("div", { "class": "error", role: "alert", hidden: "" }, [errorText, retryButton, dismissButton]);
  var input = el("textarea", { id: "hilo-input", rows: "1", placeholder: T.placeholder });
  var sendButton = el("button", { "class": "send", type: "submit", "aria-label": T.send, title: T.send }, [icon(ICON_SEND)]);
  var form = el("form", { "class": "composer" }, [
    el("label", { "class": "sr-only", "for": "hilo-input", text: T.message }), input, sendButton]);
  var panel = el("section", { "class": "panel", id: "hilo-panel", role: "dialog", "aria-label": TITLE, hidden: "" }, [
    el("header", {}, [el("h2", { text: TITLE }), memoryButton, newButton, closeButton]),
    el("div", { "class": "bar" }, [
      el("label", { "class": "sr-only", "for": "hilo-conversations", text: T.conversations }), select]),
    log, memoryView, status, errorBox, form,
  ]);
  var root = el("div", { "class": "root" + (data.position === "left" ? " left" : ""), lang: LANG }, [launcher, panel]);
  if (data.accent && window.CSS && window.CSS.supports && window.CSS.supports("color", data.accent)) {
    root.style.setProperty("--accent", data.accent);
  }
  shadow.appendChild(root);

  // ---- state -----------------------------------------------------------------------------------------------
  // `sent` counts the person's sends: a list or conversation that was asked for before the last send is older
  // than what the panel shows, and must not replace it.
  var state = { open: false, loaded: false, conversations: [], current: null, busy: false, retry: null, sent: 0,
                memories: false };

  function emit(name, detail) {
    window.dispatchEvent(new CustomEvent("hilo:" + name, { detail: detail }));
  }

  function scrollDown() { log.scrollTop = log.scrollHeight; }

  function addMessage(role, text, when) {
    var bubble = el("div", { "class": "bubble", text: text });
    if (when) bubble.title = new Date(when).toLocaleString(LANG);
    var who = role === "user" ? T.you : role === "assistant" ? TITLE : "";
    var row = el("div", { "class": "msg " + role }, who ? [el("span", { "class": "sr-only", text: who + ": " }), bubble] : [bubble]);
    log.appendChild(row);
    scrollDown();
    return row;
  }

  function showGreeting() {
    if (!log.firstChild) addMessage("notice", data.greeting || T.greeting);
  }

  function showError(message, retry) {
    state.retry = retry || null;
    errorText.textContent = message;
    retryButton.hidden = !retry;
    errorBox.hidden = false;
    emit("error", { message: message });
  }

  function clearError() { errorBox.hidden = true; state.retry = null; }

  function setBusy(busy) {
    state.busy = busy;
    sendButton.disabled = busy;
    newButton.disabled = busy;
    select.disabled = busy;
    log.setAttribute("aria-busy", busy ? "true" : "false");
    status.textContent = busy ? T.typing.replace("{title}", TITLE) : "";
  }

  function renderConversations() {
    select.textContent = "";
    if (state.current === null) select.appendChild(el("option", { value: "", text: T.newConversation }));
    state.conversations.forEach(function (c) {
      var date = new Date(c.updated_at).toLocaleDateString(LANG, { month: "short", day: "numeric" });
      select.appendChild(el("option", { value: String(c.id), text: (c.title || T.untitled) + " · " + date }));
    });
    select.value = state.current === null ? "" : String(state.current);
  }

  function remember(id) {
    state.current = id;
    credentials().then(function (who) {
      if (id === null) local.removeItem(KEY + "conversation:" + who.kind);
      else local.setItem(KEY + "conversation:" + who.kind, String(id));
    });
  }

  async function loadConversations() {
    clearError();
    var sent = state.sent;
    var who = await credentials();
    if (!who.token) { state.conversations = []; state.loaded = true; remember(null); renderConversations(); showGreeting(); return; }
    status.textContent = T.loading;
    try {
      var res = await call("GET", "/api/conversations");
      var listed = await res.json();
      keepSession(listed.session); // reading renews an old token too
      if (state.sent === sent) state.conversations = listed.conversations;
    } catch (e) {
      status.textContent = "";
      if (e.status === 401 && who.kind === "visitor") { // a visitor token this server forgot: start afresh
        state.conversations = [];
      } else {
        showError(e.status === 0 ? T.network : e.message, loadConversations);
        return;
      }
    }
    status.textContent = "";
    state.loaded = true;
    if (state.sent !== sent) { renderConversations(); return; } // the person wrote meanwhile: keep what they see
    var saved = Number(local.getItem(KEY + "conversation:" + who.kind));
    var pick = state.conversations.filter(function (c) { return c.id === saved; })[0] || state.conversations[0];
    if (pick) await openConversation(pick.id);
    else { remember(null); renderConversations(); log.textContent = ""; showGreeting(); }
  }

  async function openConversation(id) {
    clearError();
    var sent = state.sent;
    remember(id);
    renderConversations();
    log.textContent = "";
    try {
      var res = await call("GET", "/api/conversations/" + id + "/messages");
      var read = await res.json();
      keepSession(read.session);
      var messages = read.messages;
    } catch (e) {
      if (e.status === 404) { newConversation(); return; }
      showError(e.status === 0 ? T.network : e.message, function () { openConversation(id); });
      return;
    }
    if (state.current !== id || state.sent !== sent) return; // switched, or wrote, meanwhile: keep what shows
    log.textContent = "";
    messages.forEach(function (m) { addMessage(m.role === "user" ? "user" : "assistant", m.content, m.created_at); });
    showGreeting();
  }

  function newConversation() {
    if (state.busy) return;
    hideMemories();
    clearError();
    remember(null);
    renderConversations();
    log.textContent = "";
    showGreeting();
    input.focus();
  }

  function noteConversation(id, text) {
    var now = new Date().toISOString();
    var known = state.conversations.filter(function (c) { return c.id === id; })[0];
    state.conversations = state.conversations.filter(function (c) { return c.id !== id; });
    state.conversations.unshift(known ? Object.assign(known, { updated_at: now })
      : { id: id, title: text.split("\n")[0].slice(0, 60), updated_at: now });
    remember(id);
    renderConversations();
  }

  // ---- "what I remember": the person's own memories (GET /api/memories), each with a button to forget it ----
  // The view's texts come with the list, from the server's catalogue, in the widget's language.
  async function showMemories() {
    state.memories = true;
    memoryButton.setAttribute("aria-pressed", "true");
    log.hidden = true;
    memoryView.hidden = false;
    clearError();
    status.textContent = T.loading;
    var listed;
    try {
      if (!(await credentials()).token) keepSession((await (await call("POST", "/api/session")).json()).session);
      listed = await (await call("GET", "/api/memories")).json();
      keepSession(listed.session);
    } catch (e) {
      status.textContent = "";
      showError(e.status === 0 ? T.network : e.message, showMemories);
      return;
    }
    status.textContent = "";
    if (state.memories) renderMemories(listed);
  }

  function renderMemories(listed) {
    var texts = listed.texts;
    memoryView.textContent = "";
    memoryView.appendChild(el("h3", { text: texts.title }));
    if (!listed.memories.length) { memoryView.appendChild(el("p", { "class": "empty", text: texts.empty })); return; }
    var list = el("ul", {});
    listed.memories.forEach(function (m) {
      var forget = el("button", { type: "button", "class": "forget", "aria-label": texts.forget + ": " + m.content,
                                  text: texts.forget });
      forget.addEventListener("click", function () { forgetMemory(m.id, forget); });
      list.appendChild(el("li", { "data-id": m.id }, [el("span", { text: m.content }), forget]));
    });
    memoryView.appendChild(list);
    if (texts.more) memoryView.appendChild(el("p", { "class": "more", text: texts.more }));
  }

  async function forgetMemory(id, button) {
    button.disabled = true;
    try {
      keepSession((await (await call("DELETE", "/api/memories/" + encodeURIComponent(id))).json()).session);
    } catch (e) {
      if (e.status !== 404) { // gone already: the list below shows it is
        button.disabled = false;
        showError(e.status === 0 ? T.network : e.message, function () { forgetMemory(id, button); });
        return;
      }
    }
    emit("forgot", { id: id });
    await showMemories();
  }

  function hideMemories() {
    if (!state.memories) return;
    state.memories = false;
    memoryButton.setAttribute("aria-pressed", "false");
    memoryView.hidden = true;
    log.hidden = false;
  }

  // ---- one turn ----------------------------------------------------------------------------------------------
  function newId() {
    return (window.crypto && crypto.randomUUID) ? crypto.randomUUID() : String(Date.now()) + Math.random().toString(16).slice(2);
  }

  async function send(text, clientId, row) {
    if (state.busy || !text.trim()) return;
    hideMemories();
    state.sent += 1;
    clearError();
    var notice = log.querySelector(".notice");
    if (notice) notice.remove();
    row = row || addMessage("user", text);
    row.classList.remove("unsent");
    var reply = addMessage("assistant", "");
    var bubble = reply.querySelector(".bubble");
    bubble.appendChild(el("span", { "class": "dots", "aria-hidden": "true" }, [el("i"), el("i"), el("i")]));
    setBusy(true);
    var shown = "";
    var body = { text: text, client_message_id: clientId };
    if (state.current !== null) body.conversation_id = state.current;
    var zone = timeZone();
    if (zone) body.timezone = zone;  // the assistant's `now` tool tells the time in it
    var outcome = null;

    function onEvent(kind, payload) {
      if (kind === "meta") {
        if (payload.session) keepSession(payload.session);
        noteConversation(payload.conversation_id, text);
      } else if (kind === "delta") {
        shown += payload.text;
        bubble.textContent = shown;
        scrollDown();
        emit("delta", { text: payload.text });
      } else if (kind === "reset") {
        shown = "";
        bubble.textContent = "";
      } else if (kind === "done" || kind === "error") {
        if (payload.session) keepSession(payload.session); // a command answered before any meta
        outcome = { kind: kind, data: payload };
      }
    }

    try {
      if (STREAM) {
        var res = await call("POST", "/api/messages/stream", body, "text/event-stream");
        await readEvents(res, onEvent);
      } else {
        var json = await (await call("POST", "/api/messages", body)).json();
        keepSession(json.session);
        if (json.conversation_id) noteConversation(json.conversation_id, text);
        outcome = { kind: "done", data: json };
      }
    } catch (e) {
      outcome = { kind: "failed", error: e };
    }
    setBusy(false);

    if (outcome && outcome.kind === "done" && (outcome.data.status === "ok" || outcome.data.status === "command")) {
      bubble.textContent = outcome.data.reply || shown;
      emit("done", { status: "ok", conversation_id: outcome.data.conversation_id });
      return;
    }
    reply.remove();
    if (outcome && outcome.kind === "done" && outcome.data.status === "duplicate") {
      // Already received earlier (a retry after a lost connection): show what the server has.
      emit("done", { status: "duplicate", conversation_id: state.current });
      if (state.current !== null) await openConversation(state.current);
      return;
    }
    if (outcome && outcome.kind === "done") { // every model failed: the message is stored, try again later
      showError(outcome.data.reply || T.network, function () { send(text, newId(), row); });
      return;
    }
    var e = outcome && outcome.error ? outcome.error
      : new ApiError(outcome ? outcome.data.status : 0, outcome ? outcome.data : null);
    row.classList.add("unsent");
    if (e.status === 413 || e.key === "empty_message") { // fix the text, then send it again
      row.remove();
      input.value = text;
      showError(e.message, null);
      input.focus();
    } else if (e.status === 404) { // the conversation is gone: the retry starts a new one
      remember(null);
      showError(e.message, function () { send(text, clientId, row); });
    } else {
      showError(e.status === 0 ? T.network : e.message, function () { send(text, clientId, row); });
    }
  }

  async function readEvents(res, onEvent) {
    var finished = false;
    function take(block) {
      var kind = "message", lines = [];
      block.split(/\r?\n/).forEach(function (line) {
        if (!line || line[0] === ":") return;
        var i = line.indexOf(":");
        var field = i < 0 ? line : line.slice(0, i);
        var value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
        if (field === "event") kind = value;
        else if (field === "data") lines.push(value);
      });
      if (!lines.length) return;
      if (kind === "done" || kind === "error") finished = true;
      onEvent(kind, JSON.parse(lines.join("\n")));
    }
    var buffer = "";
    if (res.body && res.body.getReader) {
      var reader = res.body.getReader();
      var decoder = new TextDecoder();
      for (;;) {
        var chunk;
        try { chunk = await reader.read(); } catch (e) { throw new ApiError(0, null); }
        if (chunk.done) break;
        buffer += decoder.decode(chunk.value, { stream: true });
        var blocks = buffer.split(/\r?\n\r?\n/);
        buffer = blocks.pop();
        blocks.forEach(take);
      }
    } else {
      (await res.text()).split(/\r?\n\r?\n/).forEach(take);
    }
    if (buffer.trim()) take(buffer);
    if (!finished) throw new ApiError(0, null); // cut before the end: the retry finds the stored turn
  }

  // ---- open, close, keyboard -------------------------------------------------------------------------------
  function open() {
    if (state.open) return;
    state.open = true;
    panel.hidden = false;
    root.classList.add("open");
    launcher.setAttribute("aria-expanded", "true");
    launcher.setAttribute("aria-label", T.close);
    launcher.replaceChild(icon(ICON_DOWN), launcher.firstChild);
    session.setItem(KEY + "open", "1");
    input.focus();
    if (!state.loaded) loadConversations();
    emit("open", {});
  }

  function close() {
    if (!state.open) return;
    state.open = false;
    panel.hidden = true;
    root.classList.remove("open");
    launcher.setAttribute("aria-expanded", "false");
    launcher.setAttribute("aria-label", T.open);
    launcher.replaceChild(icon(ICON_CHAT), launcher.firstChild);
    session.removeItem(KEY + "open");
    launcher.focus();
    emit("close", {});
  }

  function submit() {
    var text = input.value;
    if (!text.trim() || state.busy) return;
    input.value = "";
    fit();
    send(text, newId());
  }

  function fit() {
    input.style.height = "auto";
    input.style.height = Math.min(input.scrollHeight + 2, 120) + "px";
  }

  launcher.addEventListener("click", function () { state.open ? close() : open(); });
  closeButton.addEventListener("click", close);
  newButton.addEventListener("click", newConversation);
  memoryButton.addEventListener("click", function () { state.memories ? hideMemories() : showMemories(); });
  select.addEventListener("change", function () {
    hideMemories();
    if (select.value) openConversation(Number(select.value));
  });
  retryButton.addEventListener("click", function () {
    var retry = state.retry;
    clearError();
    if (retry) retry();
  });
  dismissButton.addEventListener("click", clearError);
  form.addEventListener("submit", function (event) { event.preventDefault(); submit(); });
  input.addEventListener("input", fit);
  input.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) { event.preventDefault(); submit(); }
  });
  panel.addEventListener("keydown", function (event) {
    if (event.key === "Escape") { event.stopPropagation(); close(); }
  });

  window.hilo = {
    version: VERSION,
    open: open,
    close: close,
    toggle: function () { state.open ? close() : open(); },
    newConversation: newConversation,
    showMemories: showMemories,
    /** A site user token from the site's backend (HMAC or JWT), or null when the person logs out. */
    setUserToken: function (token) {
      userToken = token || null;
      state.loaded = false;
      state.current = null;
      log.textContent = "";
      if (state.open) loadConversations();
    },
  };

  function mount() {
    document.body.appendChild(host);
    if (data.open === "true" || session.getItem(KEY + "open") === "1") open();
  }
  if (document.body) mount(); else document.addEventListener("DOMContentLoaded", mount);
})();
