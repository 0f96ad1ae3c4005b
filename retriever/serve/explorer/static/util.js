// Small shared helpers: escaping, element lookup, the server's JSON, and the URL state.

const ESC = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };

export function esc(text) {
  return String(text ?? "").replace(/[&<>"']/g, (c) => ESC[c]);
}

export const $ = (id) => document.getElementById(id);

export class ServerError extends Error {}

// GET or POST one of the server's routes; a 4xx/5xx answer's {"error": {type, message}} becomes a ServerError.
export async function fetchJSON(path, body) {
  const init = body === undefined ? {} : {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  };
  const res = await fetch(path, init);
  const text = await res.text();
  let data;
  try {
    data = JSON.parse(text);
  } catch {
    throw new ServerError(`${path}: HTTP ${res.status}, not JSON`);
  }
  if (!res.ok) {
    const err = data && data.error;
    throw new ServerError(err ? `${err.type}: ${err.message}` : `${path}: HTTP ${res.status}`);
  }
  return data;
}

// The page view's address of a title, and the Wikipedia address of a revision.
export function pageHref(title) {
  return "/?page=" + encodeURIComponent(title);
}

export function claimHref(claim) {
  return "/?claim=" + encodeURIComponent(claim);
}

export function revisionHref(url, title, revId) {
  let base = "https://en.wikipedia.org";
  try {
    if (url) base = new URL(url).origin;
  } catch { /* a stored URL that does not parse: English Wikipedia */ }
  return `${base}/w/index.php?title=${encodeURIComponent(String(title).replace(/ /g, "_"))}&oldid=${revId}`;
}

export function shortDate(ts) {
  return ts ? String(ts).slice(0, 10) : "";
}

export function fmt(x, digits = 4) {
  return typeof x === "number" ? x.toFixed(digits) : "";
}
