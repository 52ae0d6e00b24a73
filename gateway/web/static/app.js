"use strict";
// The web chat: plain JS over the JSON API; the stream (server-sent events) brings replies.

// With CHATGATE_WEB_TOKEN set the page signs in once (POST /api/session sets an HttpOnly
// cookie); the token is never kept by the page or put in a URL.

const el = (id) => document.getElementById(id);
const state = { id: null, name: null, lastId: 0, seen: new Set(), source: null, lastRole: null };

function newId() {
  if (window.crypto && crypto.randomUUID) return crypto.randomUUID();
  return Date.now().toString(36) + Math.random().toString(36).slice(2);
}

async function api(path, options = {}) {
  const response = await fetch(path, { ...options, credentials: "same-origin" });
  const body = await response.json().catch(() => ({}));
  if (response.status === 401) showSignIn();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function showSignIn() {
  el("signin").hidden = false;
  el("signin-token").focus();
}

el("signin").addEventListener("submit", async (event) => {
  event.preventDefault();
  const response = await fetch("/api/session", {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ token: el("signin-token").value }),
  });
  el("signin-token").value = "";
  if (response.ok) {
    location.reload();
  } else {
    setStatus("That is not the web chat's token.");
  }
});

// While the agent works (thinking, writing, waiting for a decision) a Stop button sends
// ``/stop``: the turn ends at its next step and the conversation says who stopped it.
const WORKING = ["The agent is thinking…", "The agent is writing…", "Waiting for your decision…"];

function setStatus(text) {
  el("status").textContent = text || "";
  el("stop").hidden = !WORKING.includes(text);
}

el("stop").addEventListener("click", async () => {
  el("stop").disabled = true;
  try {
    await send("/stop");
  } catch (error) {
    setStatus("Not sent: " + error.message);
  } finally {
    el("stop").disabled = false;
  }
});

const LABELS = {
  tool: [["approve", "Approve"], ["allow_conversation", "Allow in this conversation"], ["deny", "Deny"]],
  recovery: [["approve", "Retry"], ["deny", "Skip"]],
};

function showDecision(card, approval) {
  const actions = card.querySelector(".actions");
  if (approval.status === "pending" && !approval.answering) return;
  actions.replaceChildren();
  const done = document.createElement("span");
  done.className = "decided";
  if (approval.status === "pending") done.textContent = `${approval.answering}: type your answer as your next message.`;
  else if (approval.status === "answered") done.textContent = `${approval.decided_by} answered: ${approval.answer}`;
  else if (approval.status === "expired") done.textContent = approval.kind === "question" ? "Nobody answered in time" : "Expired";
  else done.textContent = `${approval.status} by ${approval.decided_by}`;
  actions.appendChild(done);
}

// An ``ask_user`` question: a button per option (and "Other…"); the answer replaces them.
function questionCard(li, approval) {
  li.dataset.approval = approval.id;
  li.replaceChildren();
  const title = document.createElement("div");
  title.className = "title";
  title.textContent = approval.question;
  const actions = document.createElement("div");
  actions.className = "actions";
  const choices = approval.options.map((label, index) => [String(index), label]);
  if (approval.allow_other) choices.push(["other", "Other…"]);
  for (const [choice, label] of choices) {
    const button = document.createElement("button");
    button.textContent = label;
    button.onclick = () => pressCard(li, `/api/questions/${approval.id}`, { choice });
    actions.appendChild(button);
  }
  li.append(title, actions);
  showDecision(li, approval);
}


// A press on an approval's card (``/api/approvals``) or a question's (``/api/questions``):
// the card shows the outcome, or the buttons come back with the reason.
async function pressCard(card, url, payload) {
  for (const button of card.querySelectorAll("button")) button.disabled = true;
  try {
    const response = await fetch(url, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(payload),
    });
    const body = await response.json().catch(() => ({}));
    if (response.ok) showDecision(card, body);
    else if (response.status === 409 && body.approval) showDecision(card, body.approval);
    else {
      setStatus(body.error || response.statusText);
      for (const button of card.querySelectorAll("button")) button.disabled = false;
    }
  } catch (error) {
    setStatus(error.message);
    for (const button of card.querySelectorAll("button")) button.disabled = false;
  }
}

function approvalCard(li, approval) {
  if (approval.kind === "question") return questionCard(li, approval);
  li.dataset.approval = approval.id;
  li.replaceChildren();
  const title = document.createElement("div");
  title.className = "title";
  title.textContent = approval.kind === "recovery"
    ? `Run ${approval.tool} again? It may or may not have happened before a restart.`
    : `Allow ${approval.tool}?`;
  const args = document.createElement("pre");
  args.textContent = approval.shown ?? JSON.stringify(approval.arguments, null, 2);
  const warning = document.createElement("div");
  warning.className = "warning";
  warning.textContent = approval.warning ? `⚠ ${approval.warning}` : "";
  const actions = document.createElement("div");
  actions.className = "actions";
  const offered = (LABELS[approval.kind] || LABELS.tool).filter(
    ([decision]) => decision !== "allow_conversation" || approval.always_allow !== false);
  for (const [decision, label] of offered) {
    const button = document.createElement("button");
    button.textContent = label;
    button.onclick = () => pressCard(li, `/api/approvals/${approval.id}`, { decision });
    actions.appendChild(button);
  }
  li.append(title, warning, args, actions);
  showDecision(li, approval);
}

const SCHEDULE_ACTIONS = {
  active: [["pause", "Pause"], ["delete", "Delete"]],
  paused: [["resume", "Resume"], ["delete", "Delete"]],
  done: [["delete", "Delete"]],
  deleted: [],
};

// As agent_core.journaled.lag_note words it.
function lagText(lag, late) {
  let span;
  if (lag < 60) span = lag < 10 ? `${lag.toFixed(1)} s` : `${Math.round(lag)} s`;
  else if (lag < 3600) span = `${Math.floor(lag / 60)} min ${Math.floor(lag % 60)} s`;
  else span = `${Math.floor(lag / 3600)} h ${Math.floor((lag % 3600) / 60)} min`;
  return late ? `late: started ${span} after its time` : `started +${span}`;
}

function runText(run) {
  const at = (run.scheduled_for || run.finished_at || "").replace("T", " ").slice(0, 16);
  let text = `${at} UTC ${run.status}`;
  if (run.lag_seconds != null) text += ` · ${lagText(run.lag_seconds, run.late)}`;
  if (run.receipt) text += " · delivered";
  else if (run.nothing_to_report) text += " · nothing to report";
  if (run.error) text += `: ${run.error}`;
  return text;
}

async function changeSchedule(row, messageId, schedule, action) {
  for (const button of row.querySelectorAll("button")) button.disabled = true;
  try {
    const updated = await api(`/api/schedules/${schedule.id}`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ action, message_id: messageId }),
    });
    scheduleRow(row, messageId, updated);
  } catch (error) {
    setStatus(error.message);
    for (const button of row.querySelectorAll("button")) button.disabled = false;
  }
}

function scheduleRow(row, messageId, schedule) {
  row.replaceChildren();
  row.dataset.schedule = schedule.id;
  row.dataset.status = schedule.status;
  const title = document.createElement("div");
  title.className = "title";
  title.textContent = `${schedule.id} · ${schedule.when}`;
  const status = document.createElement("div");
  status.className = "schedule-status";
  const next = schedule.status === "active" && schedule.next_run_at
    ? `, next ${schedule.next_run_at.replace("T", " ").slice(0, 16)} UTC` : "";
  status.textContent = `${schedule.status}${next}`;
  const prompt = document.createElement("div");
  prompt.className = "prompt";
  prompt.textContent = schedule.prompt;
  row.append(title, status, prompt);
  if (schedule.runs && schedule.runs.length) {
    const runs = document.createElement("ul");
    runs.className = "runs";
    for (const run of schedule.runs) {
      const li = document.createElement("li");
      li.textContent = runText(run);
      runs.appendChild(li);
    }
    row.appendChild(runs);
  }
  const actions = document.createElement("div");
  actions.className = "actions";
  for (const [action, label] of SCHEDULE_ACTIONS[schedule.status] || []) {
    const button = document.createElement("button");
    button.textContent = label;
    button.dataset.action = action;
    button.onclick = () => changeSchedule(row, messageId, schedule, action);
    actions.appendChild(button);
  }
  row.appendChild(actions);
}

function jobsCard(li, item) {
  li.classList.add("jobs");
  li.replaceChildren();
  const title = document.createElement("div");
  title.className = "title";
  title.textContent = item.jobs.length ? "Schedules in this conversation" : item.text;
  li.appendChild(title);
  for (const schedule of item.jobs) {
    const row = document.createElement("div");
    row.className = "schedule";
    scheduleRow(row, item.id, schedule);
    li.appendChild(row);
  }
}

// A question chatgate asks with buttons (``forget me``'s confirmation); the answer replaces it.
function choicesCard(li, item) {
  li.classList.add("choices");
  const text = document.createElement("div");
  text.className = "title";
  text.textContent = item.text;
  const actions = document.createElement("div");
  actions.className = "actions";
  for (const choice of item.choices) {
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = choice.label;
    button.onclick = async () => {
      for (const other of actions.querySelectorAll("button")) other.disabled = true;
      try {
        const answered = await api(`/api/choices/${item.id}`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ value: choice.value }),
        });
        li.replaceChildren();
        li.classList.remove("choices");
        li.textContent = answered.text;
      } catch (error) {
        setStatus(error.message);
        for (const other of actions.querySelectorAll("button")) other.disabled = false;
      }
    };
    actions.appendChild(button);
  }
  li.append(text, actions);
}

// The reply as far as the model has written it: one bubble, replaced by the stored reply
// (or an approval prompt) when that arrives, or taken away when the stream says it is over.
function showDraft(draft) {
  let li = el("draft");
  if (!draft) {
    if (li) li.remove();
    return;
  }
  if (!li) {
    li = document.createElement("li");
    li.id = "draft";
    li.className = "assistant draft";
    li.setAttribute("aria-busy", "true");
    const text = document.createElement("span");
    text.className = "text";
    const working = document.createElement("div");
    working.className = "working";
    li.append(text, working);
    el("messages").appendChild(li);
  }
  li.querySelector(".text").textContent = draft.text;
  li.querySelector(".working").textContent = draft.status || "";
  el("messages").scrollTop = el("messages").scrollHeight;
  setStatus("The agent is writing…");
}

// A file the agent sent: a link that downloads it (and the picture itself for an image).
function fileCard(li, item) {
  li.classList.add("file");
  const link = document.createElement("a");
  link.href = item.file.url;
  link.textContent = item.text;
  link.setAttribute("download", item.file.name);
  li.appendChild(link);
  if (/^image\/(png|jpeg|gif|webp)$/.test(item.file.content_type || "")) {
    const picture = document.createElement("img");
    picture.src = item.file.url;
    picture.alt = item.file.name;
    picture.className = "sent-image";
    li.appendChild(picture);
  }
}

// 👍/👎 under a reply of the agent's: pressing one rates it (a 👎 makes the agent ask what
// went wrong; the next message is the answer), pressing it again takes the rating off. The
// emoji come from the stylesheet, so the reply's text stays its own.
function ratingButtons(li, item) {
  const bar = document.createElement("div");
  bar.className = "rating";
  const buttons = {};
  const show = (rating) => {
    for (const [value, button] of Object.entries(buttons)) {
      button.setAttribute("aria-pressed", String(value === rating));
    }
  };
  for (const [value, name] of [["up", "Good reply"], ["down", "Bad reply"]]) {
    const button = document.createElement("button");
    button.type = "button";
    button.title = name;
    button.setAttribute("aria-label", name);
    button.dataset.rating = value;
    button.onclick = async () => {
      const wanted = button.getAttribute("aria-pressed") === "true" ? null : value;
      try {
        const rated = await api("/api/feedback", {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ message_id: item.id, rating: wanted }),
        });
        show(rated.rating);
      } catch (error) {
        setStatus(error.message);
      }
    };
    buttons[value] = button;
    bar.appendChild(button);
  }
  show((item.ratings || {})["web:local"] || null);
  li.appendChild(bar);
}

function renderItem(item) {
  if (state.seen.has(item.id)) return;
  state.seen.add(item.id);
  if (item.role !== "user") showDraft(null);
  state.lastId = Math.max(state.lastId, item.id);
  state.lastRole = item.role;
  const li = document.createElement("li");
  li.className = item.role;
  li.dataset.id = item.id;
  if (item.role === "approval" && item.approval) {
    approvalCard(li, item.approval);
  } else if (Array.isArray(item.jobs)) {
    jobsCard(li, item);
  } else if (Array.isArray(item.choices)) {
    choicesCard(li, item);
  } else if (item.file) {
    fileCard(li, item);
  } else {
    li.textContent = item.text === "(attachment)" && item.files ? "" : item.text;
    if (Array.isArray(item.files) && item.files.length) {
      const files = document.createElement("div");
      files.className = "attached";
      files.textContent = "📎 " + item.files.join(", ");
      li.appendChild(files);
    }
    if (item.approval) {
      const card = document.querySelector(`li.approval[data-approval="${item.approval.id}"]`);
      if (card) showDecision(card, item.approval);
    }
    if (item.rateable) ratingButtons(li, item);
  }
  el("messages").appendChild(li);
  el("messages").scrollTop = el("messages").scrollHeight;
  const waiting = item.role === "approval" && item.approval && item.approval.status === "pending";
  const asking = waiting && item.approval.kind === "question";
  setStatus(item.role === "user" ? "The agent is thinking…" : asking ? "Waiting for your answer…" : waiting ? "Waiting for your decision…" : "");
}

async function loadConversations() {
  const items = await api("/api/conversations");
  const list = el("conversations");
  list.replaceChildren();
  for (const conversation of items) {
    const li = document.createElement("li");
    li.textContent = conversation.name;
    li.title = conversation.name;
    li.dataset.id = conversation.id;
    if (conversation.id === state.id) li.className = "active";
    li.onclick = () => openConversation(conversation.id);
    list.appendChild(li);
  }
}

function startComposer(name) {
  state.name = name;
  el("title").textContent = name;
  el("text").disabled = false;
  el("send").disabled = false;
  el("attach").disabled = false;
  el("text").focus();
}

function follow() {
  if (state.source) state.source.close();
  const query = new URLSearchParams({ after: String(state.lastId) });
  // EventSource reconnects by itself and sends Last-Event-ID, so nothing is missed; the
  // session cookie goes with it (same origin).
  state.source = new EventSource(`/api/conversations/${state.id}/stream?${query}`);
  state.source.addEventListener("message", (event) => renderItem(JSON.parse(event.data)));
  state.source.addEventListener("draft", (event) => showDraft(JSON.parse(event.data)));
}

async function openConversation(id) {
  if (state.source) state.source.close();
  Object.assign(state, { id, lastId: 0, seen: new Set(), source: null, lastRole: null });
  el("messages").replaceChildren();
  setStatus("");
  const body = await api(`/api/conversations/${id}/messages`);
  for (const item of body.items) renderItem(item);
  startComposer(body.conversation.name);
  location.hash = id;
  follow();
  loadConversations();
}

// Files chosen (the Attach button, or dropped on the page) wait here until the message
// goes: each is uploaded first (POST /api/uploads), then named in the message.
const pending = [];

function showPending() {
  const list = el("attachments");
  list.replaceChildren();
  pending.forEach((file, index) => {
    const li = document.createElement("li");
    li.textContent = file.name;
    const remove = document.createElement("button");
    remove.type = "button";
    remove.textContent = "×";
    remove.title = `Do not send ${file.name}`;
    remove.onclick = () => {
      pending.splice(index, 1);
      showPending();
    };
    li.appendChild(remove);
    list.appendChild(li);
  });
}

function attach(files) {
  if (!state.name) return;
  for (const file of files) pending.push(file);
  showPending();
}

async function upload(file) {
  const form = new FormData();
  form.append("file", file, file.name);
  const response = await fetch("/api/uploads", {
    method: "POST",
    credentials: "same-origin",
    headers: { "X-Chatgate-Upload": "1" },
    body: form,
  });
  const body = await response.json().catch(() => ({}));
  if (response.status === 401) showSignIn();
  if (!response.ok) throw new Error(`${file.name}: ${body.error || response.statusText}`);
  return { id: body.id, name: body.name };
}

el("attach").addEventListener("click", () => el("attach-input").click());
el("attach-input").addEventListener("change", () => {
  attach(el("attach-input").files);
  el("attach-input").value = "";
});
const main = document.querySelector("main");
main.addEventListener("dragover", (event) => {
  if (!state.name || !event.dataTransfer || !event.dataTransfer.types.includes("Files")) return;
  event.preventDefault();
  main.classList.add("dropping");
});
main.addEventListener("dragleave", () => main.classList.remove("dropping"));
main.addEventListener("drop", (event) => {
  main.classList.remove("dropping");
  if (!state.name || !event.dataTransfer || !event.dataTransfer.files.length) return;
  event.preventDefault();
  attach(event.dataTransfer.files);
});

async function send(text, attachments = []) {
  const message = { conversation: state.name, text, id: newId() };
  if (attachments.length) message.attachments = attachments;
  for (let attempt = 0; ; attempt++) {
    try {
      // The same id on a retry makes the server drop the duplicate.
      return await api("/api/messages", {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(message),
      });
    } catch (error) {
      if (attempt >= 2) throw error;
      await new Promise((resolve) => setTimeout(resolve, 500 * (attempt + 1)));
    }
  }
}

el("composer").addEventListener("submit", async (event) => {
  event.preventDefault();
  const text = el("text").value.trim();
  if ((!text && !pending.length) || !state.name) return;
  el("send").disabled = true;
  try {
    if (pending.length) setStatus("Uploading…");
    const attachments = [];
    for (const file of pending) attachments.push(await upload(file));
    const accepted = await send(text, attachments);
    pending.length = 0;
    showPending();
    el("text").value = "";
    if (state.id !== accepted.conversation_id) {
      state.id = accepted.conversation_id;
      location.hash = state.id;
      follow();
      loadConversations();
    }
    setStatus("The agent is thinking…");
  } catch (error) {
    setStatus("Not sent: " + error.message);
  } finally {
    el("send").disabled = false;
  }
});

el("text").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    el("composer").requestSubmit();
  }
});

el("new-conversation").addEventListener("submit", (event) => {
  event.preventDefault();
  const name = el("new-name").value.trim();
  if (!name) return;
  el("new-name").value = "";
  if (state.source) state.source.close();
  Object.assign(state, { id: null, lastId: 0, seen: new Set(), source: null, lastRole: null });
  el("messages").replaceChildren();
  setStatus("");
  startComposer(name);
});

async function loadPairing() {
  const body = await api("/api/pairing");
  const list = el("pairing-requests");
  list.replaceChildren();
  for (const request of body.pending) {
    const li = document.createElement("li");
    const who = document.createElement("span");
    who.textContent = `${request.user} (${request.code})`;
    const button = document.createElement("button");
    button.textContent = "Let in";
    button.onclick = async () => {
      button.disabled = true;
      try {
        await api(`/api/pairing/${request.code}`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: "{}",
        });
      } catch (error) {
        setStatus(error.message);
      }
      loadPairing();
    };
    li.append(who, button);
    list.appendChild(li);
  }
  el("pairing").hidden = body.pending.length === 0;
}

setInterval(() => loadPairing().catch(() => {}), 15000);
loadPairing().catch(() => {});

loadConversations().then(() => {
  const id = location.hash.slice(1);
  if (id) openConversation(id).catch((error) => setStatus(error.message));
}).catch((error) => setStatus(error.message));
