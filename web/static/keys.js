// Keyboard: j/k move between rows (calls; on a call page the next and previous call; on a diff
// the changes), n/p between breaks, Enter opens the row, f shows a call's first difference, "/"
// focuses the page's search box (else the top bar's). The view on screen answers a key through
// its ``onKey(key)`` (true: handled); typing in a field is never taken.

function typing(target) {
  const el = target && target.closest ? target : null;
  return !!(el && (el.isContentEditable || el.closest("input, textarea, select")));
}

export function bindKeys(currentView) {
  document.addEventListener("keydown", (ev) => {
    if (ev.defaultPrevented || ev.ctrlKey || ev.metaKey || ev.altKey || typing(ev.target)) return;
    const view = currentView();
    if (ev.key === "/") {
      const box = (view && view.searchBox) || document.getElementById("search-q");
      if (box) { ev.preventDefault(); box.focus(); box.select(); }
      return;
    }
    if (view && view.onKey && view.onKey(ev.key)) ev.preventDefault();
  });
}

// A selection that j/k and n/p move over the rows of a table body: the selected row gets the
// class "selected" and is scrolled into view; ``isBreak(row)`` says which rows n/p stop at.
// ``keep`` ({id, set(id)}) holds the selected row's id across redraws of the table (live calls,
// findings arriving), so a redraw does not lose the reader's place.
export function rowCursor(tbody, isBreak, keep) {
  let at = -1;
  const rows = () => Array.from(tbody.querySelectorAll(":scope > tr[data-id]"));
  const put = (i) => {
    const all = rows();
    if (!all.length) return false;
    all.forEach((r) => r.classList.remove("selected"));
    at = Math.max(0, Math.min(all.length - 1, i));
    all[at].classList.add("selected");
    if (keep) keep.id = all[at].dataset.id;
    all[at].scrollIntoView({ block: "nearest" });
    return true;
  };
  const current = () => {
    const all = rows();
    const i = all.findIndex((r) => r.classList.contains("selected"));
    return i >= 0 ? i : at;
  };
  const jump = (step) => {
    const all = rows();
    const from = current() < 0 && step < 0 ? all.length : current();
    for (let i = from + step; i >= 0 && i < all.length; i += step) if (isBreak(all[i])) return put(i);
    return false;
  };
  return {
    key(k) {
      if (k === "j") return put(current() + 1);
      if (k === "k") return put(current() < 0 ? 0 : current() - 1);
      if (k === "n") return jump(1);
      if (k === "p") return jump(-1);
      if (k === "Enter") {
        const row = rows()[current()];
        if (row) { row.click(); return true; }
      }
      return false;
    },
    selected() { return rows()[current()] || null; },
    // Mark the kept row again once the body holds its rows.
    restore() {
      if (!keep || !keep.id) return;
      const row = rows().find((r) => r.dataset.id === keep.id);
      if (!row) return;
      row.classList.add("selected");
      at = rows().indexOf(row);
      if (keep.scroll) { keep.scroll = false; row.scrollIntoView({ block: "center" }); }  // it came from another page
    },
  };
}
