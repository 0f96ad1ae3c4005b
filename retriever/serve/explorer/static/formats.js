// Reading run and gold files in the browser, and their recall@k. A run becomes [{id, claim, titles, status}] (titles:
// the page ranking, each page once); a gold file becomes Map(id -> {claim, titles}).

const BRACKETS = { "-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}", "-COLON-": ":" };

// One spelling per title: FEVER's -LRB- forms and underscores as Wikipedia writes them, the first letter upper case.
const normCache = new Map(); // a run names the same pages again and again

export function normTitle(title) {
  const key = String(title ?? "");
  let t = normCache.get(key);
  if (t !== undefined) return t;
  t = key.replace(/-(?:LRB|RRB|LSB|RSB|LCB|RCB|COLON)-/g, (m) => BRACKETS[m]);
  t = t.replace(/_/g, " ").replace(/\s+/g, " ").trim().normalize("NFC");
  t = t ? t[0].toUpperCase() + t.slice(1) : t;
  if (normCache.size < 500000) normCache.set(key, t);
  return t;
}

export class FormatError extends Error {}

function unique(titles) {
  return [...new Set(titles.filter((t) => t).map(normTitle))];
}

// JSON lines, or one JSON document (an array, or HotpotQA's {answer, sp} predictions): its records.
export function records(text, name) {
  const s = text.replace(/^\uFEFF/, "");
  const first = s.trimStart()[0];
  if (first === "[" || (first === "{" && !/}\s*\n\s*{/.test(s.slice(0, 1 << 20)))) {
    try {
      const doc = JSON.parse(s);
      if (Array.isArray(doc)) return doc;
      if (doc && doc.sp && typeof doc.sp === "object") {
        return Object.entries(doc.sp).map(([id, sp]) => ({ id, supporting_facts: sp }));
      }
      return [doc];
    } catch { /* not one document: JSON lines */ }
  }
  const out = [];
  const lines = s.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (!line) continue;
    try {
      out.push(JSON.parse(line));
    } catch (err) {
      throw new FormatError(`${name}, line ${i + 1}: not JSON (${err.message})`);
    }
  }
  return out;
}

function kiltTitles(r) {
  return (r.output || []).flatMap((o) => (o.provenance || []).map((p) => p.title || p.wikipedia_title));
}

function pairTitles(pairs) {
  return (pairs || []).map((p) => (Array.isArray(p) ? (p.length >= 4 ? p[2] : p[0]) : null));
}

// A run line's page ranking, whichever format wrote it.
function runTitles(r) {
  if (Array.isArray(r.evidence)) return unique(r.evidence.map((e) => e.title));
  if (Array.isArray(r.output)) return unique(kiltTitles(r));
  if (Array.isArray(r.predicted_pages)) return unique(r.predicted_pages);
  if (Array.isArray(r.predicted_evidence)) return unique(pairTitles(r.predicted_evidence));
  if (Array.isArray(r.supporting_facts)) return unique(pairTitles(r.supporting_facts));
  return [];
}

const idOf = (r) => String(r.id ?? r._id ?? r.uid ?? r.qid ?? "");
const claimOf = (r) => r.query ?? r.claim ?? r.question ?? r.input ?? "";

function parseTrec(text, name) {
  const runs = new Map();
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i].trim();
    if (!line) continue;
    const f = line.split(/\s+/);
    if (f.length !== 6) throw new FormatError(`${name}, line ${i + 1}: a TREC run line has 6 columns, not ${f.length}`);
    let run = runs.get(f[0]);
    if (!run) runs.set(f[0], (run = { id: f[0], claim: "", hits: [], status: "ok" }));
    run.hits.push([Number(f[3]), f[2]]);
  }
  return [...runs.values()].map((r) => ({
    id: r.id, claim: "", status: "ok", titles: unique(r.hits.sort((a, b) => a[0] - b[0]).map((h) => h[1])),
  }));
}

// One run record as the run view keeps it (its id filled in from its position when it has none).
export function runRow(r) {
  return { id: idOf(r), claim: String(claimOf(r)), status: r.status || "ok", error: r.error || null, titles: runTitles(r) };
}

function numbered(rows) {
  rows.forEach((r, i) => {
    if (!r.id) r.id = String(i + 1);
  });
  return rows;
}

export function parseRun(text, name = "run") {
  const head = text.trimStart().split("\n", 1)[0];
  if (head && !head.startsWith("{") && !head.startsWith("[") && /^\S+\s+Q0\s/.test(head)) return parseTrec(text, name);
  return numbered(records(text, name).map(runRow));
}

const PARALLEL_BYTES = 4 << 20; // a JSON-lines run this large is read by several workers, a slice each

async function isJsonLines(file) {
  const head = await file.slice(0, 1 << 16).text();
  const nl = head.indexOf("\n");
  if (nl < 0 || !head.trimStart().startsWith("{")) return false;
  try {
    JSON.parse(head.slice(0, nl));
    return true;
  } catch {
    return false;
  }
}

async function lineAt(file, offset) {
  const bytes = new Uint8Array(await file.slice(0, offset).arrayBuffer());
  return bytes.reduce((n, b) => n + (b === 10), 1);
}

function inWorker(file, start, end) {
  return new Promise((resolve, reject) => {
    const worker = new Worker(new URL("./runworker.js", import.meta.url), { type: "module" });
    worker.onmessage = (event) => {
      worker.terminate();
      resolve(event.data);
    };
    worker.onerror = (event) => {
      worker.terminate();
      reject(new FormatError(`${file.name}: ${event.message || "the reader failed"}`));
    };
    worker.postMessage({ file, start, end });
  });
}

// A run file: a large JSON-lines one parsed in slices by parallel workers, any other read whole.
export async function parseRunFile(file) {
  if (file.size < PARALLEL_BYTES || !(await isJsonLines(file))) return parseRun(await file.text(), file.name);
  const n = Math.max(2, Math.min(navigator.hardwareConcurrency || 2, 8, Math.ceil(file.size / PARALLEL_BYTES)));
  const cuts = [...Array(n + 1)].map((_, i) => Math.floor((i * file.size) / n));
  const parts = await Promise.all(cuts.slice(0, n).map((start, i) => inWorker(file, start, cuts[i + 1])));
  const bad = parts.find((p) => p.error);
  if (bad) throw new FormatError(`${file.name}, line ${await lineAt(file, bad.offset)}: not JSON (${bad.error})`);
  return numbered(parts.flatMap((p) => p.rows));
}

// A gold record's titles: {gold_titles}, FEVER's evidence groups, HoVer's and HotpotQA's supporting facts, KILT's
// provenance.
function goldTitles(r) {
  if (Array.isArray(r.gold_titles)) return unique(r.gold_titles);
  if (Array.isArray(r.evidence)) return unique(r.evidence.flatMap((group) => pairTitles(group)));
  if (Array.isArray(r.supporting_facts)) return unique(pairTitles(r.supporting_facts));
  if (Array.isArray(r.output)) return unique(kiltTitles(r));
  return [];
}

export function parseGold(text, name = "gold") {
  const gold = new Map();
  for (const r of records(text, name)) {
    const id = idOf(r);
    if (!id) throw new FormatError(`${name}: a record without an id (id, _id or uid): ${JSON.stringify(r).slice(0, 80)}`);
    gold.set(id, { claim: String(claimOf(r)), titles: goldTitles(r) });
  }
  return gold;
}

// Each run line joined to its gold: the 1-based rank of its first gold page and of its last (0: not found).
export function join(run, gold) {
  const byClaim = new Map();
  if (gold) for (const g of gold.values()) if (g.claim) byClaim.set(g.claim, g);
  return run.map((r) => {
    const g = gold ? gold.get(r.id) ?? byClaim.get(r.claim) : null;
    const titles = g ? g.titles : [];
    const ranks = titles.map((t) => r.titles.indexOf(t) + 1);
    const found = ranks.filter((x) => x > 0);
    return {
      ...r,
      claim: r.claim || (g ? g.claim : ""),
      gold: titles,
      first: found.length ? Math.min(...found) : 0,
      last: found.length === titles.length && titles.length ? Math.max(...found) : 0,
      hasGold: titles.length > 0,
    };
  });
}

// Any-gold and all-gold recall@k and MRR over the rows with gold.
export function summary(rows, ks) {
  const scored = rows.filter((r) => r.hasGold);
  const n = scored.length;
  const out = { claims: rows.length, withGold: n, errors: rows.filter((r) => r.status === "error").length, any: {}, all: {} };
  for (const k of ks) {
    let any = 0;
    let all = 0;
    for (const r of scored) {
      if (r.first && r.first <= k) any++;
      if (r.last && r.last <= k) all++;
    }
    out.any[k] = n ? any / n : null;
    out.all[k] = n ? all / n : null;
  }
  out.mrr = n ? scored.reduce((s, r) => s + (r.first ? 1 / r.first : 0), 0) / n : null;
  return out;
}
