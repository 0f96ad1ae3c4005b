// The claim's words marked in an evidence text (whole words, any case, a plural's "s" or "es" allowed).
import { esc } from "./util.js";

const STOP = new Set(("a an and are as at be but by did do does for from had has have he her his in is it its of on "
  + "or she that the their them they this to was were what when where which who whom why will with").split(" "));

export function claimWords(claim) {
  const words = String(claim || "").toLowerCase().match(/[\p{L}\p{N}]+/gu) || [];
  return [...new Set(words.filter((w) => !STOP.has(w) && (w.length > 1 || /\d/.test(w))))];
}

export function highlighter(claim) {
  const words = claimWords(claim).sort((a, b) => b.length - a.length);
  if (!words.length) return esc;
  const alt = words.map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|");
  const re = new RegExp(`(?<![\\p{L}\\p{N}])(?:${alt})(?:e?s)?(?![\\p{L}\\p{N}])`, "giu");
  return (text) => {
    const s = String(text ?? "");
    let out = "";
    let at = 0;
    for (const m of s.matchAll(re)) {
      out += esc(s.slice(at, m.index)) + "<mark>" + esc(m[0]) + "</mark>";
      at = m.index + m[0].length;
    }
    return out + esc(s.slice(at));
  };
}
