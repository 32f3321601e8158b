// Runs the page's own fairness checks (api/static/js/guard.js, verify.js) under Node's
// WebCrypto on the cases the pytest wrote; prints one JSON line per case.
import { readFileSync } from "node:fs";
import { checkHand } from "../../../api/static/js/guard.js";

const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
for (const c of cases) {
  const { problems, checks } = await checkHand(c.transcript, c.own, c.first_keys);
  console.log(JSON.stringify({ name: c.name, problems, failed: checks.filter((x) => x.status !== "pass").map((x) => x.name) }));
}
