/* hilo's admin page (surfaces/admin.py; docs/admin.md). Plain JavaScript, no build step, no framework.
   Every text comes from the catalogue through the page's JSON data block (T below); every value from the API is
   put in the page with textContent, never as HTML. The session is an HttpOnly cookie this script never sees; a
   write carries the CSRF proof the API handed over at sign-in (X-Hilo-Csrf). */
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("hilo-admin-data").textContent);
  var T = DATA.texts;
  var PAGE = 25;
  var csrf = null;

  function $(id) { return document.getElementById(id); }
  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) {
      if (k === "text") { node.textContent = attrs[k]; }
      else if (k === "className") { node.className = attrs[k]; }
      else if (k.slice(0, 2) === "on") { node.addEventListener(k.slice(2), attrs[k]); }
      else { node.setAttribute(k, attrs[k]); }
    });
    (children || []).forEach(function (c) { if (c) { node.appendChild(c); } });
    return node;
  }
  function when(iso) { return iso ? new Date(iso).toLocaleString(DATA.lang) : T.never; }
  function usd(v) { return "$" + Number(v || 0).toFixed(4); }
  function showError(text) { $("error").textContent = text || ""; }

  function api(method, path, body) {
    var headers = { "accept-language": DATA.lang };
    if (body !== undefined) { headers["content-type"] = "application/json"; }
    if (method !== "GET" && csrf) { headers["x-hilo-csrf"] = csrf; }
    return fetch("/admin/api" + path, {
      method: method, headers: headers, credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body)
    }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (data) {
        if (r.status === 401) { signedOut(); }
        if (!r.ok) { var e = new Error(data.message || r.statusText); e.status = r.status; throw e; }
        return data;
      });
    });
  }

  function views(name) {
    ["people", "person", "costs"].forEach(function (v) { $(v).hidden = v !== name; });
  }
  function signedOut() {
    csrf = null; $("nav").hidden = true; views(""); $("sign-in").hidden = false; $("token").focus();
  }
  function signedIn(data) {
    csrf = data.csrf; $("sign-in").hidden = true; $("nav").hidden = false; route();
  }

  /* -- people -------------------------------------------------------------------------------------- */
  function people(offset) {
    return api("GET", "/people?offset=" + offset + "&limit=" + PAGE).then(function (d) {
      var box = $("people"); box.textContent = "";
      box.appendChild(el("h2", { text: T.people }));
      if (!d.people.length) { box.appendChild(el("p", { className: "muted", text: T.no_people })); }
      var rows = d.people.map(function (p) {
        var ids = el("td", {}, p.identities.map(function (i) {
          return el("span", { className: "tag", text: i.surface + ": " + i.external_user_id +
                                                     (i.opted_out ? " (" + T.opted_out + ")" : "") });
        }));
        return el("tr", { className: "person", "data-id": p.id, onclick: function () { go("#/person/" + p.id); } }, [
          el("td", { text: p.handle }), ids, el("td", { text: when(p.last_seen) }),
          el("td", { className: "num", text: String(p.messages) }),
          el("td", { className: "num", text: String(p.memories) }),
          el("td", { className: "num", text: usd(p.cost_usd) })
        ]);
      });
      box.appendChild(el("table", { id: "people-table" }, [
        el("thead", {}, [el("tr", {}, [el("th", { text: T.handle }), el("th", { text: T.identities }),
          el("th", { text: T.last_seen }), el("th", { className: "num", text: T.messages }),
          el("th", { className: "num", text: T.memories }), el("th", { className: "num", text: T.cost_usd })])]),
        el("tbody", {}, rows)
      ]));
      box.appendChild(pager(d.offset, d.people.length, d.total, function (o) { go("#/people/" + o); }));
      views("people");
    });
  }
  function pager(offset, shown, total, to) {
    var label = T.page_of.replace("{first}", shown ? offset + 1 : 0).replace("{last}", offset + shown)
      .replace("{total}", total);
    var prev = el("button", { type: "button", text: T.previous, onclick: function () { to(Math.max(0, offset - PAGE)); } });
    var next = el("button", { type: "button", text: T.next, onclick: function () { to(offset + PAGE); } });
    prev.disabled = offset === 0;
    next.disabled = offset + shown >= total;
    return el("div", { className: "pager" }, [prev, el("span", { className: "muted", text: label }), next]);
  }

  /* -- one person ---------------------------------------------------------------------------------- */
  function person(id) {
    return Promise.all([api("GET", "/people/" + id), api("GET", "/people/" + id + "/memories")]).then(function (r) {
      var d = r[0], p = d.person, box = $("person"); box.textContent = "";
      var head = el("section", {}, [
        el("button", { type: "button", text: T.back, onclick: function () { go("#/people/0"); } }),
        el("h2", { id: "person-handle", text: p.handle }),
        el("p", {}, p.identities.map(function (i) {
          return el("span", { className: "tag", text: i.surface + ": " + i.external_user_id });
        })),
        el("p", { className: "muted", text: T.last_seen + ": " + when(p.last_seen) }),
        figures(d.costs)
      ]);
      var convs = el("ul", { className: "plain", id: "conversations" }, d.conversations.map(function (c) {
        return el("li", { className: "conversation", "data-id": c.id, onclick: function () { openConversation(id, c.id, this); },
                          text: c.surface + " · " + (c.title || "#" + c.id) + " · " + c.message_count + " " +
                                T.messages.toLowerCase() });
      }));
      var left = el("section", {}, [el("h2", { text: T.conversations }),
        d.conversations.length ? convs : el("p", { className: "muted", text: T.no_conversations }),
        el("div", { id: "messages" })]);
      var right = el("section", {}, [el("h2", { text: T.memories }), memoryList(id, r[1].memories)]);
      box.appendChild(head);
      box.appendChild(el("div", { className: "cols" }, [left, right]));
      views("person");
      if (d.conversations.length) { openConversation(id, d.conversations[0].id, convs.firstChild); }
    });
  }
  function openConversation(userId, convId, item, before, into) {
    var q = "?limit=" + PAGE + (before ? "&before=" + before : "");
    return api("GET", "/people/" + userId + "/conversations/" + convId + "/messages" + q).then(function (d) {
      Array.prototype.forEach.call(document.querySelectorAll("li.conversation"), function (li) {
        li.classList.toggle("open", li === item);
      });
      var box = into || $("messages");
      if (!before) { box.textContent = ""; }
      var list = el("div", {}, d.messages.map(function (m) {
        return el("div", { className: "message " + m.role, title: when(m.created_at), text: m.content });
      }));
      box.insertBefore(list, box.firstChild);
      var old = box.querySelector("button.older"); if (old) { old.remove(); }
      if (d.before) {
        box.insertBefore(el("button", { type: "button", className: "older", text: T.older, onclick: function () {
          openConversation(userId, convId, item, d.before, box);
        } }), box.firstChild);
      }
    }).catch(function (e) { showError(e.message); });
  }
  function memoryList(userId, memories) {
    if (!memories.length) { return el("p", { className: "muted", text: T.no_memories }); }
    return el("ul", { className: "plain", id: "memories" }, memories.map(function (m) {
      return memoryItem(userId, m);
    }));
  }
  function memoryItem(userId, m) {
    var ended = !!m.ended_at;
    var text = el("span", { className: "text", text: m.content });
    var li = el("li", { className: "memory" + (ended ? " ended" : ""), "data-id": m.id }, [
      el("span", { className: "tag", text: m.kind }), text,
      ended ? el("span", { className: "muted", text: T.ended }) : null
    ]);
    if (!ended) {
      li.appendChild(el("button", { type: "button", className: "edit", text: T.edit, onclick: function () {
        editMemory(userId, m, li, text);
      } }));
      li.appendChild(el("button", { type: "button", className: "delete danger", text: T.delete, onclick: function () {
        if (!window.confirm(T.confirm_delete)) { return; }
        api("DELETE", "/people/" + userId + "/memories/" + m.id).then(function () { person(userId); })
          .catch(function (e) { showError(e.message); });
      } }));
    }
    return li;
  }
  function editMemory(userId, m, li, text) {
    var area = el("textarea", { "aria-label": T.edit });
    area.value = m.content;
    var save = el("button", { type: "button", className: "primary save", text: T.save, onclick: function () {
      save.disabled = true;
      api("PATCH", "/people/" + userId + "/memories/" + m.id, { content: area.value })
        .then(function () { person(userId); })
        .catch(function (e) { save.disabled = false; showError(e.message); });
    } });
    var cancel = el("button", { type: "button", text: T.cancel, onclick: function () { person(userId); } });
    li.textContent = "";
    [el("span", { className: "tag", text: m.kind }), area, save, cancel].forEach(function (n) { li.appendChild(n); });
    area.focus();
  }
  function figures(c) {
    function one(label, f) {
      return el("div", { className: "figure" }, [el("div", { className: "muted", text: label }),
        el("div", { className: "big", text: usd(f.cost_usd) }),
        el("div", { className: "muted", text: T.calls + ": " + f.calls }),
        el("div", { className: "muted", text: T.tokens + ": " + f.tokens_in + " / " + f.tokens_out })]);
    }
    return el("div", { className: "figures" }, [one(T.today, c.today), one(T.month, c.month), one(T.all_time, c.all)]);
  }

  /* -- costs --------------------------------------------------------------------------------------- */
  function costs() {
    return api("GET", "/costs?limit=" + PAGE).then(function (d) {
      var box = $("costs"); box.textContent = "";
      box.appendChild(el("h2", { text: T.costs + " · " + T.everyone }));
      box.appendChild(figures(d.everyone));
      if (d.everyone.windows.length) {
        box.appendChild(el("h3", { text: T.windows }));
        box.appendChild(el("ul", { className: "plain" }, d.everyone.windows.map(function (w) {
          return el("li", { text: w.scope + " " + w.start + ": " + usd(w.spent_usd) });
        })));
      }
      box.appendChild(el("h3", { text: T.top }));
      box.appendChild(el("table", { id: "top-spenders" }, [
        el("thead", {}, [el("tr", {}, [el("th", { text: T.handle }), el("th", { className: "num", text: T.calls }),
          el("th", { className: "num", text: T.cost_usd })])]),
        el("tbody", {}, d.top.map(function (p) {
          return el("tr", { className: "person", onclick: function () { go("#/person/" + p.id); } }, [
            el("td", { text: p.handle }), el("td", { className: "num", text: String(p.calls) }),
            el("td", { className: "num", text: usd(p.cost_usd) })]);
        }))
      ]));
      views("costs");
    });
  }

  /* -- routing and sign-in ------------------------------------------------------------------------- */
  function go(hash) { if (location.hash === hash) { route(); } else { location.hash = hash; } }
  function route() {
    if (!csrf) { return; }
    showError("");
    var parts = location.hash.replace(/^#\/?/, "").split("/");
    var shown = parts[0] === "person" && /^\d+$/.test(parts[1]) ? person(parts[1])
      : parts[0] === "costs" ? costs() : people(/^\d+$/.test(parts[1] || "") ? Number(parts[1]) : 0);
    shown.catch(function (e) { if (e.status !== 401) { showError(e.message); } });
  }
  window.addEventListener("hashchange", route);

  document.title = T.title;
  $("title").textContent = T.title;
  $("sign-in-heading").textContent = T.sign_in_heading;
  $("token-label").textContent = T.token_label;
  $("sign-in-button").textContent = T.sign_in;
  $("nav-people").textContent = T.people;
  $("nav-costs").textContent = T.costs;
  $("sign-out").textContent = T.sign_out;
  $("nav-people").addEventListener("click", function () { go("#/people/0"); });
  $("nav-costs").addEventListener("click", function () { go("#/costs"); });
  $("sign-out").addEventListener("click", function () {
    api("DELETE", "/session").then(signedOut, signedOut);
  });
  $("sign-in").addEventListener("submit", function (ev) {
    ev.preventDefault();
    $("sign-in-error").textContent = "";
    api("POST", "/session", { token: $("token").value }).then(function (d) {
      $("token").value = ""; signedIn(d);
    }).catch(function (e) { $("sign-in-error").textContent = e.message; });
  });
  api("GET", "/session").then(signedIn, signedOut);
})();
