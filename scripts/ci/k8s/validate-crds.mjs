// Checks the Prometheus Operator objects (monitoring.coreos.com/v1) of rendered manifests
// against the operator's published API types, as @kubernetes-models/prometheus-operator
// generates them from prometheus-operator's Go API: its JSON schemas (types, required fields,
// patterns such as durations) and its TypeScript types, whose excess-property check refuses a
// field the operator does not know (what `kubectl apply`'s strict field validation refuses).
//   node validate-crds.mjs TOOLS_DIR MANIFESTS.json...
// TOOLS_DIR holds node_modules (scripts/ci/k8s-check.sh installs it); each MANIFESTS.json is a
// list of objects. Before the real objects it checks that a mistyped copy is refused by each
// check, so a check that passes everything cannot pass unnoticed.
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { join, resolve } from "node:path";

const [tools, ...files] = process.argv.slice(2).map((p) => resolve(p));
const models = join(tools, "node_modules/@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1");
const KINDS = ["ServiceMonitor", "PrometheusRule"];

async function schemaErrors(object) {
  const { [object.kind]: Model } = await import(join(models, `${object.kind}.js`));
  try {
    new Model(object).validate();
    return null;
  } catch (e) {
    return e.message;
  }
}

// One TypeScript file typing each object; tsc lists every field the types do not have.
function typeErrors(objects) {
  const dir = join(tools, "check");
  mkdirSync(dir, { recursive: true });
  const lines = objects.map(
    ({ object }, i) =>
      `import type { I${object.kind} as T${i} } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/${object.kind}";\n` +
      `export const object${i}: T${i} = ${JSON.stringify(object, null, 2)};`,
  );
  writeFileSync(join(dir, "objects.ts"), lines.join("\n") + "\n");
  try {
    execFileSync(
      join(tools, "node_modules/.bin/tsc"),
      ["--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", join(dir, "objects.ts")],
      { encoding: "utf8" },
    );
    return [];
  } catch (e) {
    return (e.stdout || e.message).trim().split("\n");
  }
}

const objects = [];
for (const file of files) {
  for (const object of JSON.parse(readFileSync(file, "utf8"))) {
    if (object?.apiVersion === "monitoring.coreos.com/v1") {
      if (!KINDS.includes(object.kind)) {
        console.error(`${file}: ${object.kind}: no check for this kind`);
        process.exit(1);
      }
      objects.push({ file, object });
    }
  }
}
if (objects.length === 0) {
  console.error("no Prometheus Operator object in the manifests given");
  process.exit(1);
}

// The checks can fail: a field's type wrong (schema) and a field misspelt (types).
const monitor = objects.find((o) => o.object.kind === "ServiceMonitor")?.object;
if (monitor) {
  const wrongType = structuredClone(monitor);
  wrongType.spec.endpoints[0].interval = "15 seconds";
  const misspelt = structuredClone(monitor);
  misspelt.spec.endpoints[0].intervall = misspelt.spec.endpoints[0].interval;
  delete misspelt.spec.endpoints[0].interval;
  if (!(await schemaErrors(wrongType))) {
    console.error("the schema check passed an interval of '15 seconds': it checks nothing");
    process.exit(1);
  }
  if (typeErrors([{ object: misspelt }]).length === 0) {
    console.error("the type check passed a field 'intervall': it checks nothing");
    process.exit(1);
  }
}

let failed = false;
for (const { file, object } of objects) {
  const error = await schemaErrors(object);
  if (error) {
    console.error(`${file}: ${object.kind}/${object.metadata?.name}: ${error}`);
    failed = true;
  }
}
const errors = typeErrors(objects);
for (const line of errors) console.error(line);
if (failed || errors.length > 0) process.exit(1);
for (const { file, object } of objects) {
  console.log(`${file}: ${object.kind}/${object.metadata.name} matches prometheus-operator's API`);
}
