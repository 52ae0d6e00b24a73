"use strict";
// The operator console: plain JS over /api/console/... Every value is put on the page as
// text (textContent, never innerHTML): messages, tool arguments and results are whatever
// people and the model wrote.

const view = document.getElementById("view");
const statusLine = document.getElementById("status");

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// The page's content: nodes, lists of nodes, text ("" and null are nothing).
function show(...nodes) {
  view.replaceChildren(...nodes.flat(2).filter((node) => node !== "" && node !== null && node !== undefined));
}

function setStatus(text, error = false) {
  statusLine.textContent = text || "";
  statusLine.className = error ? "error" : "";
}

// Each route() is a navigation. A page's read that answers after a newer navigation began
// is dropped (Stale), so a slow older answer never paints over the page asked for last.
let navigations = 0;
class Stale extends Error {}

async function api(path, options = {}) {
  const began = navigations;
  const init = { credentials: "same-origin", ...options };
  if (options.body !== undefined) {
    init.method = options.method || "POST";
    init.headers = { "Content-Type": "application/json" };
    init.body = JSON.stringify(options.body);
  }
  const response = await fetch(path, init);
  const body = await response.json().catch(() => ({}));
  if (response.status === 401) {
    document.getElementById("signin").hidden = false;
    document.getElementById("signin-token").focus();
  }
  if (!response.ok) throw new Error(body.error || response.statusText);
  if (options.body === undefined && began !== navigations) throw new Stale("");
  return body;
}

document.getElementById("signin").addEventListener("submit", async (event) => {
  event.preventDefault();
  const response = await fetch("/api/session", {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token: document.getElementById("signin-token").value }),
  });
  document.getElementById("signin-token").value = "";
  if (response.ok) location.reload();
  else setStatus("That is not the token.", true);
});

const when = (iso) => (iso ? new Date(iso).toLocaleString() : "");
const money = (usd) => "$" + Number(usd || 0).toFixed(usd && usd < 0.01 ? 5 : 2);
const badge = (text) => h("span", { class: "badge " + text }, text);
const json = (value) => h("pre", {}, typeof value === "string" ? value : JSON.stringify(value, null, 2));

function table(headers, rows) {
  return h(
    "table",
    {},
    h("thead", {}, h("tr", {}, headers.map((title) => h("th", { class: /^(Tokens|Cost|Turns|Calls|Tools|Attempts|#)/.test(title) ? "num" : "" }, title)))),
    h("tbody", {}, rows),
  );
}

function title(text) {
  document.getElementById("page-title").textContent = text;
  document.title = text + " · chatgate console";
}

async function action(label, fn) {
  setStatus(label + "…");
  try {
    const result = await fn();
    setStatus(label + ": done.");
    await route();
    return result;
  } catch (error) {
    setStatus(label + " failed: " + error.message, true);
    return null;
  }
}

// -- conversations ---------------------------------------------------------------------------

async function conversations(params) {
  title("Conversations");
  const query = params.get("q") || "";
  const platform = params.get("platform") || "";
  const search = h("input", { type: "search", name: "q", value: query, "aria-label": "Search conversations", placeholder: "A word from any message" });
  const pick = h("select", { name: "platform", "aria-label": "Platform" },
    ["", "slack", "telegram", "discord", "web"].map((p) => h("option", { value: p, selected: p === platform }, p || "every platform")));
  const form = h("form", { class: "bar", role: "search" }, search, pick, h("button", { type: "submit" }, "Search"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const chosen = new URLSearchParams();
    if (search.value) chosen.set("q", search.value);
    if (pick.value) chosen.set("platform", pick.value);
    location.hash = "#/conversations?" + chosen;
  });
  const url = new URLSearchParams({ limit: "50" });
  if (query) url.set("q", query);
  if (platform) url.set("platform", platform);
  if (params.get("before")) url.set("before", params.get("before"));
  const page = await api("/api/console/conversations?" + url);
  const rows = page.items.map((c) =>
    h("tr", { class: "clickable conversation", onclick: () => (location.hash = "#/conversation/" + c.id) },
      h("td", {}, badge(c.platform)),
      h("td", {}, c.channel + (c.thread ? " › " + c.thread : ""), h("div", { class: "snippet" }, c.snippet || "")),
      h("td", { class: "num" }, c.turns),
      h("td", {}, when(c.updated_at))));
  show(form, table(["Platform", "Conversation", "Turns", "Last activity"], rows), nextLink(page.next, "#/conversations", query, platform));
  if (!rows.length) view.append(h("p", {}, query ? "No message holds that." : "No conversations yet."));
}

function nextLink(next, base, query, platform) {
  if (!next) return "";
  const params = new URLSearchParams({ before: String(next) });
  if (query) params.set("q", query);
  if (platform) params.set("platform", platform);
  return h("p", {}, h("a", { href: base + "?" + params }, "Older →"));
}

async function conversation(id) {
  const turnsPage = await api("/api/console/turns?conversation=" + encodeURIComponent(id) + "&limit=100");
  const said = await api("/api/console/conversations/" + encodeURIComponent(id) + "/messages?limit=100");
  title("Conversation " + id);
  show(
    h("h3", {}, "Turns"),
    turnsTable(turnsPage.items),
    h("h3", {}, "Messages (newest first)"),
    table(["When", "Role", "Author", "Text", "Turn"], said.items.map((m) =>
      h("tr", {}, h("td", {}, when(m.created_at)), h("td", {}, m.role), h("td", {}, m.author || ""),
        h("td", {}, m.text), h("td", {}, m.turn_id ? h("a", { href: "#/turn/" + m.turn_id }, "#" + m.turn_id) : "")))),
  );
}

// -- turns -----------------------------------------------------------------------------------

function turnsTable(items) {
  return table(["#", "When", "Who", "Asked", "Status", "Tools", "Tokens", "Cost"], items.map((t) =>
    h("tr", { class: "clickable turn", onclick: () => (location.hash = "#/turn/" + t.id) },
      h("td", { class: "num" }, t.id), h("td", {}, when(t.created_at)), h("td", {}, t.user),
      h("td", {}, t.asked || ""), h("td", {}, badge(t.status), t.attempts > 1 ? h("span", { class: "meta" }, " ×" + t.attempts) : ""),
      h("td", { class: "num" }, t.tool_calls), h("td", { class: "num" }, t.tokens), h("td", { class: "num" }, money(t.cost_usd)))));
}

async function turnsList(params) {
  title("Turns");
  const url = new URLSearchParams({ limit: "50" });
  for (const key of ["status", "user", "before"]) if (params.get(key)) url.set(key, params.get(key));
  const page = await api("/api/console/turns?" + url);
  const status = h("select", { name: "status", "aria-label": "Status" }, ["", "pending", "running", "waiting", "done", "failed"].map((s) => h("option", { value: s, selected: s === (params.get("status") || "") }, s || "any status")));
  const user = h("input", { name: "user", value: params.get("user") || "", placeholder: "user id", "aria-label": "User" });
  const form = h("form", { class: "bar" }, status, user, h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const chosen = new URLSearchParams();
    if (status.value) chosen.set("status", status.value);
    if (user.value) chosen.set("user", user.value);
    location.hash = "#/turns?" + chosen;
  });
  const older = new URLSearchParams({ before: String(page.next) });
  for (const key of ["status", "user"]) if (params.get(key)) older.set(key, params.get(key));
  show(form, turnsTable(page.items), page.next ? h("p", {}, h("a", { href: "#/turns?" + older }, "Older →")) : "");
}

function approvalLine(approval, label) {
  if (!approval) return "";
  const decided = approval.decided_by
    ? `${approval.status} by ${approval.decided_by} after ${approval.waited_seconds}s`
    : approval.status;
  return h("div", { class: "approval-line" }, label + ": ", badge(approval.status), " ", h("span", { class: "decided" }, decided));
}

function stepView(step) {
  const took = step.ms !== null ? ` · ${step.ms} ms` : "";
  if (step.kind === "model_call") {
    const sections = Object.entries(step.context_tokens || {}).map(([k, v]) => `${k} ${v}`).join(", ");
    return h("div", { class: "step model_call" },
      h("h3", {}, `Model call (step ${step.seq})`, " ", badge(step.status)),
      h("div", { class: "meta" }, `${step.model || "no model"}${step.profile ? ` (profile ${step.profile})` : ""} · ${step.prompt_tokens ?? 0} in / ${step.completion_tokens ?? 0} out · ${money(step.cost_usd)}${took}`),
      sections ? h("div", { class: "meta" }, "Context: " + sections + (step.messages ? ` (${step.messages} messages)` : "")) : "",
      step.tool_calls && step.tool_calls.length ? h("div", {}, "Asked for: " + step.tool_calls.join(", ")) : "",
      step.text ? json(step.text) : "",
      step.error ? h("div", { class: "meta" }, "Error: " + step.error) : "");
  }
  if (step.kind === "tool_call") {
    return h("div", { class: "step tool_call" },
      h("h3", {}, `Tool call: ${step.tool || "?"} (step ${step.seq})`, " ", badge(step.outcome || step.status)),
      h("div", { class: "meta" }, `Journal status ${step.status}${took}`),
      approvalLine(step.approval, "Approval"),
      approvalLine(step.recovery, "Recovery after a crash"),
      h("div", {}, "Arguments"), json(step.arguments ?? {}),
      h("div", {}, "Result" + (step.truncated ? " (first 4,000 characters)" : "")), json(step.result ?? ""));
  }
  if (step.kind === "approval") {
    return h("div", { class: "step approval" },
      h("h3", {}, `Approval for ${step.tool || "?"} (step ${step.seq})`, " ", badge(step.approval ? step.approval.status : step.status)),
      approvalLine(step.approval, "Asked of " + (step.approval ? [step.approval.requested_by, ...step.approval.approvers].join(", ") + ", admins" : "?")),
      step.arguments ? json(step.arguments) : "");
  }
  return h("div", { class: "step " + step.kind },
    h("h3", {}, `${step.kind} (step ${step.seq})`, " ", badge(step.status)),
    h("div", { class: "meta" }, took.replace(" · ", "")),
    step.output ? json(step.output) : "");
}

async function turnView(id) {
  const turn = await api("/api/console/turns/" + encodeURIComponent(id));
  title("Turn " + turn.id);
  const facts = h("dl", { class: "facts" }, [
    ["Conversation", h("a", { href: "#/conversation/" + turn.conversation_id }, `${turn.platform} ${turn.channel}`)],
    ["Person", turn.user], ["Status", badge(turn.status)], ["Attempts", String(turn.attempts)],
    ["Lane", turn.lane], ["Created", when(turn.created_at)], ["Finished", when(turn.finished_at)],
    ["Tokens", `${turn.prompt_tokens} in / ${turn.completion_tokens} out`], ["Cost", money(turn.cost_usd)],
    ["Stopped by", turn.stopped_by || "—"], ["Error", turn.error || "—"],
  ].flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
  const receipts = turn.messages.map((m) =>
    h("li", { class: "receipt" }, `${m.role}: `, m.text.length > 200 ? m.text.slice(0, 200) + "…" : m.text,
      m.receipt ? h("span", { class: "meta" }, ` · delivered as ${m.receipt} `) : "",
      m.link ? h("a", { href: m.link, target: "_blank", rel: "noopener noreferrer" }, "open in " + turn.platform) : ""));
  show(
    facts,
    turn.prompt ? h("div", {}, h("h3", {}, "Prompt"), json(turn.prompt)) : "",
    h("h3", {}, "Timeline"),
    turn.steps.length ? turn.steps.map(stepView) : h("p", {}, "No steps journaled yet."),
    h("h3", {}, "Messages and delivery receipts"),
    h("ul", { class: "receipts" }, receipts),
    h("h3", {}, "Feedback"),
    turn.feedback.length ? feedbackTable(turn.feedback, false) : h("p", {}, "Nobody rated its reply."),
  );
}

// -- feedback --------------------------------------------------------------------------------

const RATINGS = { up: "👍", down: "👎" };

function feedbackTable(items, withTurn) {
  const comment = (f) => (f.comment === null ? (f.asked_at ? "(asked, no answer)" : "") : f.comment === "" ? "(skipped)" : f.comment);
  return table([...(withTurn ? ["Turn", "Asked by", "Where"] : []), "Rated", "Who", "Rating", "What went wrong"], items.map((f) =>
    h("tr", { class: "feedback" },
      ...(withTurn ? [h("td", {}, h("a", { href: "#/turn/" + f.turn_id }, "#" + f.turn_id)), h("td", {}, f.asked_by), h("td", {}, `${f.platform} ${f.channel}`)] : []),
      h("td", {}, when(f.updated_at)), h("td", {}, f.user), h("td", { title: f.rating }, RATINGS[f.rating] || f.rating), h("td", {}, comment(f)))));
}

async function feedbackList(params) {
  title("Feedback");
  const rating = params.get("rating") || "";
  const url = new URLSearchParams({ limit: "50" });
  if (rating) url.set("rating", rating);
  if (params.get("before")) url.set("before", params.get("before"));
  const page = await api("/api/console/feedback?" + url);
  const pick = h("select", { name: "rating", "aria-label": "Rating" }, [["", "👍 and 👎"], ["up", "👍 only"], ["down", "👎 only"]].map(([value, label]) => h("option", { value, selected: value === rating }, label)));
  const form = h("form", { class: "bar" }, pick, h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = "#/feedback" + (pick.value ? "?rating=" + pick.value : "");
  });
  const older = new URLSearchParams({ before: String(page.next) });
  if (rating) older.set("rating", rating);
  show(form, page.items.length ? feedbackTable(page.items, true) : h("p", {}, "No rated replies."),
    page.next ? h("p", {}, h("a", { href: "#/feedback?" + older }, "Older →")) : "");
}

// -- approvals -------------------------------------------------------------------------------

async function approvals() {
  title("Approvals");
  const pending = await api("/api/console/approvals?state=pending");
  const decided = await api("/api/console/approvals?state=decided&limit=50");
  const decide = (a, decision) => () => action(`${decision} ${a.id}`, () => api("/api/console/approvals/" + a.id, { body: { decision } }));
  show(
    h("h3", {}, `Waiting (${pending.items.length})`),
    table(["Asked", "Tool", "Arguments", "By", "Where", ""], pending.items.map((a) =>
      h("tr", { class: "pending-approval", "data-id": a.id },
        h("td", {}, when(a.created_at)), h("td", {}, a.tool + (a.kind === "recovery" ? " (run again?)" : "")),
        h("td", {}, json(a.arguments)), h("td", {}, a.requested_by),
        h("td", {}, h("a", { href: "#/turn/" + a.turn_id }, `${a.platform} ${a.channel}`)),
        h("td", {}, h("button", { onclick: decide(a, "approve") }, "Approve"), " ",
          h("button", { onclick: decide(a, "allow_conversation") }, "Allow in this conversation"), " ",
          h("button", { onclick: decide(a, "deny") }, "Deny"))))),
    h("h3", {}, "Decided"),
    table(["Decided", "Tool", "Decision", "By", "Waited", "Turn"], decided.items.map((a) =>
      h("tr", {}, h("td", {}, when(a.decided_at)), h("td", {}, a.tool), h("td", {}, badge(a.status)),
        h("td", {}, a.decided_by || ""), h("td", {}, a.waited_seconds !== null ? a.waited_seconds + " s" : ""),
        h("td", {}, h("a", { href: "#/turn/" + a.turn_id }, "#" + a.turn_id))))),
  );
}

// -- schedules -------------------------------------------------------------------------------

async function schedules() {
  title("Schedules");
  const page = await api("/api/console/schedules");
  const change = (s, verb) => () => action(`${verb} ${s.id}`, () => api("/api/console/schedules/" + s.id, { body: { action: verb } }));
  const edit = (s) => () => {
    const prompt = window.prompt("Prompt", s.prompt);
    if (prompt === null) return;
    const spec = window.prompt("Schedule (cron, every N{s,m,h,d} or an ISO time; empty keeps it)", "");
    const body = { action: "edit", prompt };
    if (spec) Object.assign(body, { schedule: spec, timezone: s.timezone });
    action(`edit ${s.id}`, () => api("/api/console/schedules/" + s.id, { body }));
  };
  const cards = page.items.map((s) =>
    h("div", { class: "step schedule", "data-id": s.id },
      h("h3", {}, `${s.id} · ${s.when}`, " ", badge(s.status)),
      h("div", { class: "meta" }, `${s.platform} ${s.channel} · by ${s.created_by} · ${s.failures} failures in a row`),
      json(s.prompt),
      s.next_fire_times.length ? h("div", {}, "Next fire times (" + s.timezone + "):", h("ol", { class: "fires" }, s.next_fire_times.map((t) => h("li", {}, t)))) : "",
      h("div", {},
        s.status === "active" ? h("button", { onclick: change(s, "pause") }, "Pause") : "",
        s.status === "paused" ? h("button", { onclick: change(s, "resume") }, "Resume") : "", " ",
        h("button", { onclick: change(s, "run_now") }, "Run now"), " ",
        h("button", { onclick: edit(s) }, "Edit"), " ",
        h("button", { onclick: change(s, "delete") }, "Delete")),
      table(["Slot", "Status", "Started", "Attempts", "Receipt", "Error", "Turn"], s.runs.map((r) =>
        h("tr", { class: "run" }, h("td", {}, when(r.scheduled_for || r.created_at)), h("td", {}, badge(r.status)),
          h("td", {}, r.lag_seconds == null ? "" : (r.late ? badge("late") : ""), r.lag_seconds == null ? "" : " +" + r.lag_seconds.toFixed(1) + " s"),
          h("td", { class: "num" }, r.attempts), h("td", {}, r.receipt || (r.nothing_to_report ? "nothing to report" : "")), h("td", {}, r.error || ""),
          h("td", {}, r.turn_id ? h("a", { href: "#/turn/" + r.turn_id }, "#" + r.turn_id) : ""))))));
  const conversation = h("input", { name: "conversation_id", placeholder: "conversation id", "aria-label": "Conversation id", required: true });
  const prompt = h("input", { name: "prompt", placeholder: "what to do", "aria-label": "Prompt", required: true });
  const spec = h("input", { name: "schedule", placeholder: "0 9 * * 1-5 / every 2h", "aria-label": "Schedule", required: true });
  const zone = h("input", { name: "timezone", placeholder: "time zone (optional)", "aria-label": "Time zone" });
  const form = h("form", { class: "bar" }, conversation, prompt, spec, zone, h("button", { type: "submit" }, "Create"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const body = { conversation_id: conversation.value, prompt: prompt.value, schedule: spec.value };
    if (zone.value) body.timezone = zone.value;
    action("create schedule", () => api("/api/console/schedules", { body }));
  });
  show(h("h3", {}, "New schedule"), form, cards.length ? cards : h("p", {}, "No schedules."));
}

// -- people ----------------------------------------------------------------------------------

async function people() {
  title("People and access");
  const found = await api("/api/console/people");
  const usage = (user) => found.usage[user] || { turns: 0, tokens: 0, cost_usd: 0, month_cost_usd: 0 };
  const pairing = (code, verb) => () => action(`${verb} ${code}`, () => api("/api/console/pairing/" + encodeURIComponent(code), { body: { action: verb } }));
  const revoke = (user) => () => action(`revoke ${user}`, () => api("/api/console/revoke", { body: { user } }));
  const who = h("input", { name: "user", placeholder: "slack:U123", "aria-label": "Person" });
  const exportLink = h("button", { type: "button", onclick: () => { if (who.value) location.href = "/api/console/export?user=" + encodeURIComponent(who.value); } }, "Export their data");
  const forget = h("button", { type: "button", onclick: () => {
    if (!who.value) return;
    const typed = window.prompt(`Erase everything about ${who.value}? This cannot be undone. Type the id again to confirm.`);
    if (typed !== who.value) return setStatus("Not erased: the id was not typed again.", true);
    action(`erase ${who.value}`, () => api("/api/console/forget", { body: { user: who.value, confirm: typed } }))
      .then((receipt) => receipt && setStatus(`Erased ${receipt.user}: ${receipt.messages} messages, ${receipt.memories} memories, ${receipt.schedules} schedules, ${receipt.files} files.`));
  } }, "Erase their data");
  const allUsers = new Set([...found.paired.map((p) => p.user), ...Object.keys(found.usage)]);
  show(
    h("p", {}, `Access mode: ${found.access}. Admins: ${found.admins.join(", ") || "none"}. Always allowed: ${found.allow.join(", ") || "none"}.`),
    h("h3", {}, `Waiting to be let in (${found.pending.length})`),
    table(["Code", "Who", "Platform", "Asked", ""], found.pending.map((p) =>
      h("tr", { class: "pairing", "data-code": p.code }, h("td", {}, h("code", {}, p.code)), h("td", {}, p.user), h("td", {}, p.platform),
        h("td", {}, when(p.created_at)),
        h("td", {}, h("button", { onclick: pairing(p.code, "let_in") }, "Let in"), " ", h("button", { onclick: pairing(p.code, "refuse") }, "Refuse"))))),
    h("h3", {}, "People"),
    table(["Who", "Let in by", "Turns", "Tokens", "Cost (all)", "Cost (month)", ""], [...allUsers].map((user) => {
      const paired = found.paired.find((p) => p.user === user);
      const used = usage(user);
      return h("tr", { class: "person" }, h("td", {}, user),
        h("td", {}, paired ? (paired.revoked_at ? `revoked by ${paired.revoked_by}` : `${paired.approved_by}, ${when(paired.approved_at)}`) : "—"),
        h("td", { class: "num" }, used.turns), h("td", { class: "num" }, used.tokens), h("td", { class: "num" }, money(used.cost_usd)),
        h("td", { class: "num" }, money(used.month_cost_usd)),
        h("td", {}, paired && !paired.revoked_at ? h("button", { onclick: revoke(user) }, "Revoke") : ""));
    })),
    h("div", { class: "danger" }, h("h3", {}, "A person's data"), h("div", { class: "bar" }, who, " ", exportLink, " ", forget)),
    h("h3", {}, "Access changes"),
    table(["When", "Who", "Did", "To"], found.changes.map((c) => h("tr", {}, h("td", {}, when(c.at)), h("td", {}, c.actor), h("td", {}, c.action), h("td", {}, c.user)))),
  );
}

// -- usage -----------------------------------------------------------------------------------

function barChart(items, value, label) {
  const ns = "http://www.w3.org/2000/svg";
  const width = 720, height = 160, gap = 2;
  const most = Math.max(...items.map(value), 0) || 1;
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height + 30}`);
  svg.setAttribute("width", String(width));
  svg.setAttribute("class", "chart");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", label);
  const bar = items.length ? width / items.length : width;
  items.forEach((item, i) => {
    const tall = (value(item) / most) * height;
    const rect = document.createElementNS(ns, "rect");
    rect.setAttribute("x", String(i * bar + gap / 2));
    rect.setAttribute("y", String(height - tall));
    rect.setAttribute("width", String(Math.max(1, bar - gap)));
    rect.setAttribute("height", String(tall));
    const tip = document.createElementNS(ns, "title");
    tip.textContent = `${item.key}: ${value(item)}`;
    rect.append(tip);
    svg.append(rect);
    if (items.length <= 31) {
      const text = document.createElementNS(ns, "text");
      text.setAttribute("x", String(i * bar + 2));
      text.setAttribute("y", String(height + 14));
      text.textContent = String(item.key ?? "—").slice(-10);
      svg.append(text);
    }
  });
  return svg;
}

async function usageView(params) {
  title("Usage and cost");
  const by = params.get("by") || "day";
  const days = params.get("days") || "30";
  const found = await api(`/api/console/usage?by=${encodeURIComponent(by)}&days=${encodeURIComponent(days)}`);
  const pick = h("select", { name: "by", "aria-label": "Break down by" }, ["day", "user", "conversation", "platform", "model"].map((b) => h("option", { value: b, selected: b === by }, "by " + b)));
  const span = h("input", { name: "days", type: "number", min: "1", value: days, "aria-label": "Days" });
  const form = h("form", { class: "bar" }, pick, span, "days", h("button", { type: "submit" }, "Show"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = `#/usage?by=${pick.value}&days=${span.value}`;
  });
  const budgets = Object.entries(found.budgets).filter(([, limit]) => limit !== null);
  const today = found.today;
  const near = budgets.flatMap(([name, limit]) => {
    if (name === "daily_usd") return [[`everyone today (${money(limit)})`, today.day_cost_usd, limit]];
    if (name === "user_daily_usd") return Object.entries(today.per_user).map(([u, s]) => [`${u} today (${money(limit)})`, s.cost_usd, limit]);
    if (name === "user_daily_tokens") return Object.entries(today.per_user).map(([u, s]) => [`${u} today (${limit} tokens)`, s.tokens, limit]);
    if (name === "conversation_tokens") return today.conversations.map((c) => [`${c.conversation_id} (${limit} tokens)`, c.tokens, limit]);
    if (name === "conversation_usd") return today.conversations.map((c) => [`${c.conversation_id} (${money(limit)})`, c.cost_usd, limit]);
    return [[`${name}: ${limit} per turn`, 0, limit]];
  });
  show(
    form,
    h("p", {}, `All time: ${found.totals.model_calls} model calls, ${found.totals.prompt_tokens + found.totals.completion_tokens} tokens, ${money(found.totals.cost_usd)}.`),
    h("p", {}, `Replies rated in these ${days} days: 👍 ${found.feedback.up}, 👎 ${found.feedback.down} (`, h("a", { href: "#/feedback" }, "see them"), ")."),
    h("h3", {}, "Dollars"), barChart(found.items, (i) => i.cost_usd, "Dollars " + by),
    h("h3", {}, "Tokens"), barChart(found.items, (i) => i.tokens, "Tokens " + by),
    h("h3", {}, "Turns"), barChart(found.items, (i) => i.turns, "Turns " + by),
    h("h3", {}, "Tool calls"), barChart(found.items, (i) => i.tool_calls, "Tool calls " + by),
    table([by, "Turns", "Calls", "Tools", "Tokens", "Cost"], found.items.map((i) =>
      h("tr", {}, h("td", {}, i.key ?? "—"), h("td", { class: "num" }, i.turns), h("td", { class: "num" }, i.model_calls),
        h("td", { class: "num" }, i.tool_calls), h("td", { class: "num" }, i.tokens), h("td", { class: "num" }, money(i.cost_usd))))),
    h("h3", {}, "Budgets"),
    budgets.length ? near.map(([label, spent, limit]) => h("div", { class: "budget" }, h("progress", { max: String(limit), value: String(Math.min(spent, limit)) }), ` ${label}: ${Math.round((spent / limit) * 100)}%`)) : h("p", {}, "No budgets are set."),
  );
}

// -- audit -----------------------------------------------------------------------------------

async function audit(params) {
  title("Audit log");
  const query = params.get("q") || "";
  const url = new URLSearchParams({ limit: "100" });
  if (query) url.set("q", query);
  if (params.get("before")) url.set("before", params.get("before"));
  const page = await api("/api/console/audit?" + url);
  const search = h("input", { type: "search", value: query, "aria-label": "Search the audit log", placeholder: "who, what, on whom" });
  const form = h("form", { class: "bar", role: "search" }, search, h("button", { type: "submit" }, "Search"),
    h("a", { href: "/api/console/audit.jsonl" + (query ? "?q=" + encodeURIComponent(query) : ""), download: "chatgate-audit.jsonl" }, "Export as JSON Lines"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = "#/audit" + (search.value ? "?q=" + encodeURIComponent(search.value) : "");
  });
  show(form,
    table(["When", "Who", "Did", "On", "Detail"], page.items.map((e) =>
      h("tr", { class: "audit" }, h("td", {}, when(e.at)), h("td", {}, e.actor), h("td", {}, e.action),
        h("td", {}, e.subject || "", e.turn_id ? h("a", { href: "#/turn/" + e.turn_id }, ` (turn ${e.turn_id})`) : ""),
        h("td", {}, e.detail ? json(e.detail) : "")))),
    nextLink(page.next, "#/audit", query));
}

// -- health ----------------------------------------------------------------------------------

async function health() {
  title("Health");
  const found = await api("/api/console/health");
  const mb = (bytes) => (bytes / 1048576).toFixed(1) + " MiB";
  show(
    h("h3", {}, "Platforms"),
    table(["Platform", "Connected", "Last event", "Deaf since", "Reason"], Object.entries(found.platforms).map(([name, p]) =>
      h("tr", {}, h("td", {}, name), h("td", {}, p.connected ? "yes" : "no"), h("td", {}, when(p.last_event_at)), h("td", {}, when(p.deaf_since)), h("td", {}, p.reason || "")))),
    h("h3", {}, "Work"),
    h("dl", { class: "facts" }, [
      ["Jobs", Object.entries(found.jobs.by_status).map(([k, v]) => `${k} ${v}`).join(", ") || "none"],
      ["Oldest due job waited", found.jobs.oldest_due_seconds + " s"],
      ["Turns running here", String(found.turns_in_flight)],
      ["Oldest open turn", found.journal.oldest_open_turn_seconds === null ? "none" : found.journal.oldest_open_turn_seconds + " s"],
      ["Failed turns (last hour)", String(found.journal.failed_turns_last_hour)],
      ["Failed jobs (last hour)", String(found.journal.failed_jobs_last_hour)],
      ["Dead letters (last hour)", String(found.journal.dead_letters_last_hour)],
      ["Turns resumed after a crash or lease takeover (last hour)", String(found.journal.resumed_turns_last_hour)],
      ["Recovery prompts (last hour)", String(found.journal.recovery_prompts_last_hour)],
    ].flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    found.journal.recent_errors.length ? table(["Turn", "Error", "When"], found.journal.recent_errors.map((e) =>
      h("tr", {}, h("td", {}, h("a", { href: "#/turn/" + e.turn_id }, "#" + e.turn_id)), h("td", {}, e.error || ""), h("td", {}, when(e.at))))) : "",
    h("h3", {}, "Processes on this machine"),
    table(["PID", "Name", "Role", "Memory (RSS)"], found.processes.map((p) =>
      h("tr", {}, h("td", {}, p.pid), h("td", {}, p.name), h("td", {}, p.role || ""), h("td", { class: "num" }, mb(p.rss_bytes))))),
  );
}

// -- routing ---------------------------------------------------------------------------------

async function route() {
  navigations += 1;
  const [path, query] = (location.hash.slice(1) || "/conversations").split("?");
  const params = new URLSearchParams(query || "");
  const [, page, id] = path.split("/");
  for (const link of document.querySelectorAll("#tabs a")) {
    link.classList.toggle("active", link.getAttribute("href").slice(2) === page || (page === "turn" && link.getAttribute("href") === "#/turns") || (page === "conversation" && link.getAttribute("href") === "#/conversations"));
  }
  try {
    switch (page) {
      case "conversation": return await conversation(decodeURIComponent(id));
      case "turns": return await turnsList(params);
      case "turn": return await turnView(id);
      case "feedback": return await feedbackList(params);
      case "approvals": return await approvals();
      case "schedules": return await schedules();
      case "people": return await people();
      case "usage": return await usageView(params);
      case "audit": return await audit(params);
      case "health": return await health();
      default: return await conversations(params);
    }
  } catch (error) {
    if (!(error instanceof Stale)) setStatus(error.message, true);
  }
}

window.addEventListener("hashchange", () => { setStatus(""); route(); });
route();
