// The analyses' words (relation kinds, epoch reasons, cache verdicts, outcomes, marker kinds, API
// ids), read once from the API at start: the page keeps no copy of a list the vocabulary defines.
// `vocab.RelationKind.EPOCH_START` is a value; `kinds(vocab.MarkerKind)` lists them in order.
// (docs/architecture.md, "One spelling of each word")

import { getJSON } from "./api.js";

export const vocab = {}; // enum name -> { MEMBER_NAME: value }, and `words`; filled by loadVocabulary()

let loading = null;

export function loadVocabulary() {
  if (!loading) loading = getJSON("/vocabulary").then((v) => Object.assign(vocab, v));
  return loading;
}

export function kinds(table) {
  return Object.values(table || {});
}

// The word people read for a value ("append" for APPEND_ONLY), from the API's `words` table, the
// CLI's own (ctxscope.vocab.words); an enum with no words gets {} and its values show as they are.
export function words(kind) {
  return (vocab.words && vocab.words[kind]) || {};
}

// A definition's one-line explanation (how a lost dollar is priced...), from the API's `sentences`,
// written by the module that defines it: shown as a tooltip wherever the figure is.
export function sentence(name) {
  return (vocab.sentences && vocab.sentences[name]) || "";
}
