// The page view: a page as the store holds it (GET /pages/{title}), its links opening their own page views.
import { $, esc, fetchJSON, pageHref, revisionHref, shortDate } from "./util.js";

let go = null;
let shown = null;

export function init(navigate) {
  go = navigate;
  $("page-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const title = $("page-input").value.trim();
    if (title) go(pageHref(title));
  });
}

export async function open(params) {
  const title = params.get("page");
  if (!title) {
    $("page-input").focus();
    return;
  }
  $("page-input").value = title;
  if (title === shown) return;
  $("page-status").textContent = "Loading…";
  try {
    const page = await fetchJSON("/pages/" + encodeURIComponent(title));
    $("page-body").innerHTML = pageHtml(page);
    $("page-status").textContent = "";
    document.title = `${page.title} · wikiground`;
    shown = title;
  } catch (err) {
    $("page-body").innerHTML = "";
    $("page-status").textContent = err.message;
    shown = null;
  }
}

const link = (t) => `<a href="${esc(pageHref(t))}">${esc(t)}</a>`;

function listSection(id, heading, items, render = link) {
  if (!items || !items.length) return "";
  return `<section aria-labelledby="${id}"><h3 id="${id}">${heading} <span class="muted">(${items.length})</span></h3>
<ul class="inline">${items.map((x) => `<li>${render(x)}</li>`).join("")}</ul></section>`;
}

function headerHtml(p) {
  const from = p.redirected_from ? `<p class="muted">redirected from ${esc(p.redirected_from)}</p>` : "";
  const rev = p.rev_id != null
    ? ` · <a class="rev" href="${esc(revisionHref(p.url, p.title, p.rev_id))}" target="_blank" rel="noopener noreferrer">rev ${esc(p.rev_id)}</a>`
      + (p.rev_timestamp ? ` <time datetime="${esc(p.rev_timestamp)}">${esc(shortDate(p.rev_timestamp))}</time>` : "")
    : "";
  const url = p.url ? ` · <a href="${esc(p.url)}" target="_blank" rel="noopener noreferrer">on Wikipedia</a>` : "";
  const dis = p.is_disambiguation ? ' · <span class="chip">disambiguation</span>' : "";
  return `<h2 id="page-title">${esc(p.title)}</h2>${from}
<p class="meta">page ${esc(p.page_id)} · <span class="origin o-${esc(p.origin)}">${esc(p.origin)}</span>${rev}${url}${dis}</p>`;
}

function infoboxHtml(infobox) {
  return Object.entries(infobox || {}).map(([kind, fields]) => `<table class="infobox">
<caption>Infobox ${esc(kind)}</caption><tbody>${Object.entries(fields).map(([k, v]) =>
    `<tr><th scope="row">${esc(k)}</th><td>${esc(v)}</td></tr>`).join("")}</tbody></table>`).join("");
}

function sectionsHtml(sections) {
  return (sections || []).map((s) => {
    const level = Math.min(6, Math.max(3, (s.level || 2) + 1));
    const head = s.index === 0 ? "" : `<h${level}>${esc(s.heading_path || s.heading)}</h${level}>`;
    const paras = String(s.text || "").split(/\n+/).filter(Boolean).map((t) => `<p>${esc(t)}</p>`).join("");
    return `<section class="psec">${head}${paras}</section>`;
  }).join("");
}

export function pageHtml(p) {
  const options = p.is_disambiguation ? listSection("pg-options", "Options", p.options) : "";
  const anchor = (l) => link(l.title) + (l.anchor && l.anchor !== l.title ? ` <span class="muted">“${esc(l.anchor)}”</span>` : "");
  const lead = p.sections && p.sections.length ? "" : `<p>${esc(p.lead)}</p>`;
  return headerHtml(p) + options + `<div class="pagegrid"><div class="pagetext">${lead}${sectionsHtml(p.sections)}</div>
<aside aria-label="Page facts">${infoboxHtml(p.infobox)}
${listSection("pg-redirects", "Redirects here", p.redirects, esc)}
${listSection("pg-cats", "Categories", p.categories, esc)}
${listSection("pg-see", "See also", p.see_also)}</aside></div>
${listSection("pg-links", "Links", p.links, anchor)}`;
}
