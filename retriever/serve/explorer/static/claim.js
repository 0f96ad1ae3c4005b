// The claim view: the request form, the fused evidence list, the multi-hop trace and the kg paths.
import { $, esc, fetchJSON, fmt, pageHref, revisionHref, shortDate } from "./util.js";
import { highlighter } from "./highlight.js";

let go = null;
let options = null; // the server's channels, fusions, defaults and bounds (/explorer/api/options)
let optionsReady = null;
let lastKey = null; // the request shown now: opening the same URL again does not search again
let lastAnswer = null;
let searchSeq = 0;
export const timings = { renderMs: null, serverMs: null };

export function init(navigate) {
  go = navigate;
  optionsReady = fetchJSON("/explorer/api/options").then(fillOptions, (err) => {
    $("claim-status").textContent = `cannot read the server's options: ${err.message}`;
  });
  $("claim-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const href = formHref();
    if (href) go(href);
  });
  $("claim-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      $("claim-form").requestSubmit();
    }
  });
  $("claim-results").addEventListener("click", onMore);
}

function fillOptions(opts) {
  options = opts;
  $("opt-k").max = String(opts.max_k);
  $("claim-input").maxLength = opts.max_claim_chars;
  const chosen = opts.defaults.indexes ? opts.defaults.indexes.split(",") : opts.channels;
  $("opt-channels").innerHTML = opts.channels.map((c) =>
    `<label><input type="checkbox" name="channel" value="${esc(c)}"${chosen.includes(c) ? " checked" : ""}> ${esc(c)}</label>`
  ).join(" ");
  $("opt-live").disabled = !opts.on_the_fly;
  $("opt-live-wrap").title = opts.on_the_fly ? "" : "the server was started without --on-the-fly";
  $("opt-fusion").innerHTML = opts.fusions.map((f) =>
    `<option value="${esc(f)}"${f === opts.fusion ? " selected" : ""}>${esc(f)}</option>`).join("");
  const weights = Object.entries(opts.weights).map(([c, w]) => `${c}=${w}`).join(", ");
  $("opt-weights").textContent = `weights: ${weights}`;
}

// The URL of the form's request: only what differs from the server's defaults besides the claim and k.
function formHref() {
  const claim = $("claim-input").value.trim();
  if (!claim) return null;
  const q = new URLSearchParams({ claim, k: $("opt-k").value || "10" });
  if (options) {
    const picked = [...document.querySelectorAll("#opt-channels input:checked")].map((i) => i.value);
    const dflt = options.defaults.indexes ? options.defaults.indexes.split(",") : options.channels;
    if (picked.length && picked.join(",") !== dflt.join(",")) q.set("indexes", picked.join(","));
  }
  if (options && $("opt-fusion").value && $("opt-fusion").value !== options.fusion) q.set("fusion", $("opt-fusion").value);
  const d = options ? options.defaults : { multihop: false, on_the_fly: false };
  if ($("opt-multihop").checked !== d.multihop) q.set("multihop", $("opt-multihop").checked ? "1" : "0");
  if ($("opt-live").checked !== d.on_the_fly) q.set("on_the_fly", $("opt-live").checked ? "1" : "0");
  return "/?" + q.toString();
}

function requestOf(params) {
  const body = { claim: params.get("claim") || "" };
  const k = parseInt(params.get("k"), 10);
  if (Number.isFinite(k)) body.k = k;
  if (params.get("indexes")) body.indexes = params.get("indexes");
  if (params.get("fusion")) body.fusion = params.get("fusion");
  if (params.has("multihop")) body.multihop = params.get("multihop") === "1";
  if (params.has("on_the_fly")) body.on_the_fly = params.get("on_the_fly") === "1";
  return body;
}

// The form as the request will be asked: what the URL leaves out is the server's default.
function fillForm(body) {
  const d = options ? options.defaults : { k: 10, indexes: null, multihop: false, on_the_fly: false };
  $("claim-input").value = body.claim;
  $("opt-k").value = String(body.k ?? d.k);
  $("opt-multihop").checked = body.multihop ?? d.multihop;
  $("opt-live").checked = body.on_the_fly ?? d.on_the_fly;
  if (options) $("opt-fusion").value = body.fusion ?? options.fusion;
  const indexes = body.indexes ?? d.indexes;
  const set = indexes ? new Set(indexes.split(",")) : null;
  for (const box of document.querySelectorAll("#opt-channels input")) box.checked = !set || set.has(box.value);
}

export async function open(params) {
  await optionsReady;
  const body = requestOf(params);
  fillForm(body);
  if (!body.claim) {
    searchSeq++; // an answer still on its way is not shown
    clear();
    $("claim-status").textContent = "";
    $("claim-input").focus();
    return;
  }
  const key = JSON.stringify(body);
  if (key === lastKey && lastAnswer) return;
  await search(body, key);
}

async function search(body, key) {
  const seq = ++searchSeq;
  const status = $("claim-status");
  status.textContent = "Searching…";
  $("claim-results").setAttribute("aria-busy", "true");
  const t0 = performance.now();
  let answer;
  try {
    answer = await fetchJSON("/search", body);
  } catch (err) {
    if (seq !== searchSeq) return;
    status.textContent = err.message;
    clear();
    $("claim-results").removeAttribute("aria-busy");
    return;
  }
  if (seq !== searchSeq) return; // a newer search has started
  const tAnswer = performance.now();
  render(answer, body.claim);
  void document.body.offsetHeight; // the layout belongs to the render time
  timings.renderMs = performance.now() - tAnswer;
  timings.serverMs = tAnswer - t0;
  lastKey = key;
  lastAnswer = answer;
  const n = answer.evidence.length;
  status.textContent = answer.status === "ok" || !answer.error
    ? `${n} evidence item${n === 1 ? "" : "s"}${answer.fusion ? ` · fused by ${answer.fusion}` : ""} · answered in ${Math.round(timings.serverMs)} ms · drawn in ${timings.renderMs.toFixed(1)} ms`
    : `${answer.status}: ${answer.error}`;
  const results = $("claim-results");
  results.dataset.renderMs = timings.renderMs.toFixed(2);
  results.removeAttribute("aria-busy");
  fillRevisionDates(answer.evidence, seq);
}

function clear() {
  $("claim-results").innerHTML = "";
  $("claim-entities").innerHTML = "";
  $("claim-hops").innerHTML = "";
  lastKey = lastAnswer = null;
}

export function render(answer, claim) {
  const mark = highlighter(claim);
  $("claim-entities").innerHTML = entitiesHtml(answer.entities);
  $("claim-hops").innerHTML = hopsHtml(answer.hops);
  $("claim-results").innerHTML = answer.evidence.map((e, i) => itemHtml(e, i + 1, mark)).join("");
}

function entitiesHtml(entities) {
  if (!entities || !entities.length) return "";
  const items = entities.map((e) => e.title
    ? `<li>${esc(e.mention)} → <a href="${esc(pageHref(e.title))}">${esc(e.title)}</a></li>`
    : `<li>${esc(e.mention)} → <span class="muted">no local page</span></li>`).join("");
  return `<section class="panel" aria-labelledby="ent-h"><h3 id="ent-h">Entities of the claim</h3><ul class="inline">${items}</ul></section>`;
}

function queryHtml(kind, q) {
  const titles = q.titles.length
    ? q.titles.map((t) => `<a href="${esc(pageHref(t))}">${esc(t)}</a>`).join(", ")
    : '<span class="muted">nothing</span>';
  const from = q.from ? ` <span class="muted">from ${esc(q.from)}</span>` : "";
  return `<li><span class="kind">${esc(kind)}</span> “${esc(q.query)}”${from} → ${titles}</li>`;
}

function hopHtml(h) {
  const queries = Object.entries(h.queries || {}).flatMap(([kind, qs]) => qs.map((q) => queryHtml(kind, q))).join("");
  const bridges = [...new Set(Object.values(h.queries || {}).flat().map((q) => q.from).filter(Boolean))];
  const links = (ts) => ts.map((t) => `<a href="${esc(pageHref(t))}">${esc(t)}</a>`).join(", ") || "none";
  return `<li class="hop"><h4>Hop ${h.hop} <span class="muted">${Math.round(h.ms || 0)} ms</span></h4>
<p>bridge pages: ${links(bridges)}</p><ul class="queries">${queries}</ul>
<p>new pages: ${links(h.new_titles || [])}</p><p>ranking after the hop: ${links(h.ranking || [])}</p></li>`;
}

function hopsHtml(hops) {
  if (!hops || !hops.length) return "";
  return `<section class="panel" aria-labelledby="hops-h"><h3 id="hops-h">Hops</h3><ol class="hops">${hops.map(hopHtml).join("")}</ol></section>`;
}

// kg facts as subject —relation→ object chains: a fact whose subject is the previous fact's object continues it.
export function chains(triples) {
  const out = [];
  for (const t of triples) {
    const last = out[out.length - 1];
    if (last && t.hop > 1 && last[last.length - 1].object === t.subject) last.push(t);
    else out.push([t]);
  }
  return out;
}

function chainHtml(chain) {
  const steps = chain.map((t) => ` <span class="rel">—${esc(t.relation)}→</span> ${esc(t.object)}`).join("");
  const score = chain[chain.length - 1].score;
  return `<li>${esc(chain[0].subject)}${steps}${typeof score === "number" ? ` <span class="muted">${fmt(score, 3)}</span>` : ""}</li>`;
}

function chipsHtml(ranks) {
  return Object.entries(ranks || {}).map(([c, r]) =>
    `<li class="chip ch-${esc(c)}" aria-label="${esc(c)} rank ${r}">${esc(c)} <b>#${r}</b></li>`).join("");
}

function originHtml(e) {
  let out = `<span class="origin o-${esc(e.origin)}">${esc(e.origin || "local")}</span>`;
  if (e.rev_id != null) {
    out += ` <a class="rev" href="${esc(revisionHref(e.url, e.title, e.rev_id))}" rel="noopener noreferrer"`
      + ` target="_blank">rev ${esc(e.rev_id)}</a> <time class="revdate" data-page="${esc(e.page_id)}"></time>`;
  }
  if (e.fetched_at) out += ` <span class="muted">fetched ${esc(e.fetched_at)}</span>`;
  return out;
}

function hopLine(e) {
  if (e.hop == null) return "";
  const via = e.via ? ` via <a href="${esc(pageHref(e.via))}">${esc(e.via)}</a>` : "";
  const by = e.found_by ? ` · found by ${esc(e.found_by.kind)} “${esc(e.found_by.query)}”` : "";
  return `<span class="hopinfo">hop ${esc(e.hop)}${via}${by}</span>`;
}

function itemHtml(e, n, mark) {
  const section = e.section ? ` <span class="sect">› ${esc(e.section)}</span>` : "";
  const entity = e.retrieved_for_entity
    ? `<span class="ent">for entity <b>${esc(e.retrieved_for_entity)}</b></span>` : "";
  const pageScore = e.page_score != null ? ` · page ${fmt(e.page_score)}` : "";
  const kg = e.triples && e.triples.length
    ? `<ul class="kg" aria-label="Knowledge-graph paths">${chains(e.triples).map(chainHtml).join("")}</ul>` : "";
  const more = e.more_passages && e.more_passages.length
    ? `<button type="button" class="more" aria-expanded="false" aria-controls="more-${n}"
 data-ids="${esc(e.more_passages.join(","))}">more passages (${e.more_passages.length})</button>
<div class="morebox" id="more-${n}" hidden></div>` : "";
  return `<li class="ev" data-title="${esc(e.title)}">
<div class="evhead"><span class="rank" aria-hidden="true">${n}</span>
<h3><a href="${esc(pageHref(e.title))}">${esc(e.title)}</a>${section}</h3>
<span class="scores">score ${fmt(e.score)}${pageScore}</span></div>
<ul class="chips" aria-label="Channel ranks">${chipsHtml(e.ranks)}</ul>
<p class="meta">${entity} ${originHtml(e)} <span class="muted">${esc(e.source)}</span> ${hopLine(e)}</p>${kg}
<p class="text">${mark(e.evidence_text)}</p>${more}</li>`;
}

async function fillRevisionDates(evidence, seq) {
  const ids = [...new Set(evidence.filter((e) => e.rev_id != null && e.origin !== "live").map((e) => e.page_id))];
  if (!ids.length) return;
  let pages;
  try {
    pages = (await fetchJSON("/explorer/api/revisions?page_ids=" + ids.slice(0, 200).join(","))).pages;
  } catch {
    return; // the dates are a nicety: the revision links stand without them
  }
  if (seq !== searchSeq) return;
  for (const t of document.querySelectorAll("#claim-results time.revdate")) {
    const p = pages[t.dataset.page];
    if (p && p.rev_timestamp) {
      t.dateTime = p.rev_timestamp;
      t.textContent = shortDate(p.rev_timestamp);
    }
  }
}

async function onMore(event) {
  const button = event.target.closest("button.more");
  if (!button) return;
  const box = $(button.getAttribute("aria-controls"));
  const opening = button.getAttribute("aria-expanded") !== "true";
  button.setAttribute("aria-expanded", String(opening));
  box.hidden = !opening;
  if (!opening || box.dataset.loaded) return;
  box.textContent = "Loading…";
  try {
    const { passages } = await fetchJSON("/explorer/api/passages?ids=" + button.dataset.ids);
    const mark = highlighter($("claim-input").value);
    box.innerHTML = `<ol class="morelist">${passages.map((p) =>
      `<li><span class="sect">${esc(p.section || "lead")}</span> <p class="text">${mark(p.text)}</p></li>`).join("")}</ol>`;
    box.dataset.loaded = "1";
  } catch (err) {
    box.textContent = err.message;
  }
}
