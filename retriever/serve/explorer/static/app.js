// The explorer's router: the URL holds the view and its state (/?claim=...&k=..., /?page=Title, /?view=run), so a
// link reproduces a view; the page's own links change the view without a reload.
import { $ } from "./util.js";
import * as claim from "./claim.js";
import * as page from "./page.js";
import * as run from "./run.js";

const VIEWS = { claim, page, run };

function viewOf(params) {
  if (params.has("claim")) return "claim";
  if (params.has("page")) return "page";
  const v = params.get("view");
  return v in VIEWS ? v : "claim";
}

function show(name) {
  for (const v of Object.keys(VIEWS)) {
    $("view-" + v).hidden = v !== name;
    const nav = $("nav-" + v);
    if (v === name) nav.setAttribute("aria-current", "page");
    else nav.removeAttribute("aria-current");
  }
}

export function route() {
  const params = new URLSearchParams(location.search);
  const name = viewOf(params);
  show(name);
  VIEWS[name].open(params);
}

// Go to a same-origin "/?..." address: a history entry, then the view it names.
export function go(href, { replace = false } = {}) {
  if (replace) history.replaceState(null, "", href);
  else history.pushState(null, "", href);
  route();
}

function onClick(event) {
  if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) {
    return;
  }
  const a = event.target.closest("a[href]");
  if (!a || a.target || a.origin !== location.origin || a.pathname !== "/") return;
  event.preventDefault();
  go(a.getAttribute("href"));
  if (!a.closest("nav")) $("main").focus({ preventScroll: true });
}

function start() {
  for (const v of Object.values(VIEWS)) v.init(go);
  document.addEventListener("click", onClick);
  window.addEventListener("popstate", route);
  route();
}

start();
