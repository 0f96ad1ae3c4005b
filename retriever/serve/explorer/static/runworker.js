// Parses one byte slice of a JSON-lines run for the run view: the lines that start inside [start, end), the last
// one read to its end past the slice. A newline byte never occurs inside a UTF-8 character, so slices cut there.
import { runRow } from "./formats.js";

const NL = 10;

async function bytes(blob) {
  return new Uint8Array(await blob.arrayBuffer());
}

// The bytes from the line's end at or after `at` (inclusive of the newline), read 64 KiB at a time.
async function rest(file, at) {
  const parts = [];
  while (at < file.size) {
    const chunk = await bytes(file.slice(at, Math.min(file.size, at + (1 << 16))));
    const nl = chunk.indexOf(NL);
    if (nl >= 0) {
      parts.push(chunk.subarray(0, nl + 1));
      break;
    }
    parts.push(chunk);
    at += chunk.length;
  }
  return parts;
}

async function slice(file, start, end) {
  const from = start > 0 ? start - 1 : 0; // the byte before the slice tells whether a line starts at `start`
  const body = await bytes(file.slice(from, end));
  let skip = 0;
  if (start > 0) {
    const nl = body.indexOf(NL);
    if (nl < 0) return { text: "", at: end }; // one line spans the slice: the slice before reads it
    skip = nl + 1;
  }
  const tail = end < file.size && body[body.length - 1] !== NL ? await rest(file, end) : [];
  const joined = new Uint8Array(body.length - skip + tail.reduce((n, t) => n + t.length, 0));
  joined.set(body.subarray(skip), 0);
  let at = body.length - skip;
  for (const t of tail) {
    joined.set(t, at);
    at += t.length;
  }
  return { text: new TextDecoder().decode(joined), at: from + skip };
}

self.onmessage = async (event) => {
  const { file, start, end } = event.data;
  const { text, at } = await slice(file, start, end);
  const rows = [];
  let ci = 0; // the line's first character in `text`
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line) {
      try {
        rows.push(runRow(JSON.parse(line)));
      } catch (err) {
        self.postMessage({ error: err.message, offset: at + new TextEncoder().encode(text.slice(0, ci)).length });
        return;
      }
    }
    ci += raw.length + 1;
  }
  self.postMessage({ rows });
};
