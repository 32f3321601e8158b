// The page's witness policy, shipped with the page (docs/howto/witnesses.md): the witnesses
// whose cosignatures it trusts (C2SP tlog-cosignature/v1 verifier keys) and how many of them
// a checkpoint must carry. The operator's `/log/witnesses` list is informational only: the
// page never takes its keys or quorum from the server it is checking. A deployment with
// witnesses sets them here when it builds the page; quorum 0 accepts a checkpoint the log
// alone signed (a development platform has no witnesses).
export const WITNESS_POLICY = Object.freeze({
  quorum: 0,
  witnesses: Object.freeze([]),
});
