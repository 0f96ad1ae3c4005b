// The run view: a batch output and a gold file read in the browser (never uploaded), recall@k, and a table of the
// claims, filterable to the misses, each opening its claim view. The table shows one page of rows at a time.
import { $, claimHref, esc, pageHref } from "./util.js";
import { join, parseGold, parseRunFile, summary } from "./formats.js";

const PAGE_ROWS = 100;
const KS = [1, 2, 5, 10, 20, 50, 100];
let rows = [];
let shownRows = [];
let pageNo = 0;
let depth = 10; // the longest ranking in the run: the claim view asks for as many
export const timings = { loadMs: null };

export function init() {
  $("run-file").addEventListener("change", load);
  $("gold-file").addEventListener("change", load);
  $("run-misses").addEventListener("change", () => applyFilter());
  $("run-k").addEventListener("change", () => applyFilter());
  let timer = null;
  $("run-filter").addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(applyFilter, 120);
  });
  $("run-prev").addEventListener("click", () => showPage(pageNo - 1));
  $("run-next").addEventListener("click", () => showPage(pageNo + 1));
}

export function open() {}

async function load() {
  const runFile = $("run-file").files[0];
  const goldFile = $("gold-file").files[0];
  if (!runFile) {
    $("run-status").textContent = goldFile ? "Gold file chosen: now choose the run." : "";
    return;
  }
  const t0 = performance.now();
  $("run-status").textContent = "Reading…";
  try {
    const [run, goldText] = await Promise.all([parseRunFile(runFile), goldFile ? goldFile.text() : null]);
    const gold = goldText === null ? null : parseGold(goldText, goldFile.name);
    rows = join(run, gold);
  } catch (err) {
    $("run-status").textContent = err.message;
    return;
  }
  depth = rows.reduce((m, r) => Math.max(m, r.titles.length), 1);
  const ks = KS.filter((k) => k <= depth);
  if (!ks.includes(depth) && depth < 100) ks.push(depth);
  const s = summary(rows, ks);
  $("run-summary").innerHTML = summaryHtml(s, ks, runFile.name, goldFile && goldFile.name);
  $("run-k").innerHTML = ks.map((k) => `<option value="${k}"${k === Math.min(depth, 10) ? " selected" : ""}>${k}</option>`).join("");
  $("run-controls").hidden = false;
  $("run-misses").disabled = !s.withGold;
  applyFilter();
  void document.body.offsetHeight; // the layout of the summary and the first rows belongs to the load time
  timings.loadMs = performance.now() - t0;
  $("run-summary").dataset.loadMs = timings.loadMs.toFixed(1);
  $("run-status").textContent = `${rows.length} claims read in ${Math.round(timings.loadMs)} ms`;
}

const pct = (x) => (x === null ? "–" : (100 * x).toFixed(1));

function summaryHtml(s, ks, runName, goldName) {
  const head = ks.map((k) => `<th scope="col">@${k}</th>`).join("");
  const line = (label, m) => `<tr><th scope="row">${label}</th>${ks.map((k) => `<td>${pct(m[k])}</td>`).join("")}</tr>`;
  const table = s.withGold
    ? `<table class="summary" id="run-recall"><caption>Recall@k, % of the ${s.withGold} claims with gold pages</caption>
<thead><tr><th scope="col">pages</th>${head}</tr></thead>
<tbody>${line("any gold page", s.any)}${line("every gold page", s.all)}</tbody></table>
<p>MRR of the first gold page: <b id="run-mrr">${s.mrr.toFixed(4)}</b></p>`
    : `<p class="muted">No gold file (or no gold pages for these claims): choose one for recall@k.</p>`;
  return `<section class="panel" aria-labelledby="sum-h"><h3 id="sum-h">Summary</h3>
<p>${esc(runName)}${goldName ? " against " + esc(goldName) : ""}: <b id="run-claims">${s.claims}</b> claims,
${s.withGold} with gold, ${s.errors} failed.</p>${table}</section>`;
}

function applyFilter() {
  const missesOnly = $("run-misses").checked;
  const k = parseInt($("run-k").value, 10) || depth;
  const needle = $("run-filter").value.trim().toLowerCase();
  shownRows = rows.filter((r) => {
    if (missesOnly && !(r.hasGold && !(r.first && r.first <= k))) return false;
    if (!needle) return true;
    return r.id.toLowerCase().includes(needle) || r.claim.toLowerCase().includes(needle)
      || r.gold.some((t) => t.toLowerCase().includes(needle)) || r.titles.some((t) => t.toLowerCase().includes(needle));
  });
  $("run-count").textContent = `${shownRows.length} of ${rows.length} claims`;
  $("run-table").hidden = false;
  showPage(0);
}

function rowHtml(r) {
  const claim = r.claim
    ? `<a href="${esc(claimHref(r.claim) + "&k=" + depth)}">${esc(r.claim)}</a>` : '<span class="muted">(no claim text)</span>';
  const found = new Set(r.titles);
  const gold = r.gold.map((t) => `<a class="${found.has(t) ? "hit" : "miss"}" href="${esc(pageHref(t))}">${esc(t)}</a>`).join(", ");
  const rank = r.status === "error" ? `<span class="miss">error</span>` : r.hasGold ? (r.first || "miss") : "–";
  const top = r.titles.slice(0, 3).map((t) => `<a href="${esc(pageHref(t))}">${esc(t)}</a>`).join(", ");
  return `<tr class="${r.hasGold && !r.first ? "missrow" : ""}"><td>${esc(r.id)}</td><td>${claim}</td><td>${gold}</td><td>${rank}</td><td>${top}</td></tr>`;
}

function showPage(n) {
  const pages = Math.max(1, Math.ceil(shownRows.length / PAGE_ROWS));
  pageNo = Math.min(Math.max(0, n), pages - 1);
  const start = pageNo * PAGE_ROWS;
  $("run-rows").innerHTML = shownRows.slice(start, start + PAGE_ROWS).map(rowHtml).join("");
  $("run-pager").hidden = pages < 2;
  $("run-prev").disabled = pageNo === 0;
  $("run-next").disabled = pageNo >= pages - 1;
  $("run-pageinfo").textContent = `page ${pageNo + 1} of ${pages}`;
}
