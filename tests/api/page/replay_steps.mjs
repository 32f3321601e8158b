// Prints stepsOf(transcript) for each transcript file named on the command line, as JSON
// lines (tests/api/test_api_support.py compares them with the rules core's replay).
import { readFileSync } from "node:fs";
import { stepsOf } from "../../../api/static/js/replay.js";

for (const file of process.argv.slice(2)) {
  const steps = stepsOf(JSON.parse(readFileSync(file, "utf8")));
  process.stdout.write(JSON.stringify(steps.map(({ kind, seat, tile, end, ends, hands, result }) =>
    ({ kind, seat, tile, end, ends, left: hands.map((h) => h.length), result }))) + "\n");
}
