// The arithmetic of the web site's calculators, on the numbers servebook writes (calculators.json).
//
// servebook computes every byte count: per model, KV dtype and layer kind the bytes one token
// stores and the most tokens a layer holds; per precision the weight bytes; per GPU its memory.
// This module only multiplies, sums, caps and floors them, in BigInt so that no count is ever
// rounded, and lays out the text. tests/test_calculators.py runs it with Node against servebook.
// (Plain ES2020, which Quarto's OJS resource scanner parses.)

const LABEL_WIDTH = 13;

function big(value) {
  return BigInt(value);
}

function smaller(a, b) {
  return a < b ? a : b;
}

// Bytes of `value` units, floored, from the shortest decimal that reads back as `value` (as
// servebook reads a size through str(): 69.5 GiB is 69.5 GiB, not the binary float nearest it).
export function decimalBytes(value, unitBytes) {
  const match = /^(\d+)(?:\.(\d+))?(?:e([+-]?\d+))?$/.exec(String(value));
  if (match === null) {
    throw new Error(`${value} is not a finite number >= 0`);
  }
  const fraction = match[2] || "";
  const digits = big(match[1] + fraction);
  const scale = fraction.length - Number(match[3] || "0");  // value = digits / 10^scale
  if (scale <= 0) {
    return digits * 10n ** big(-scale) * big(unitBytes);
  }
  return (digits * big(unitBytes)) / 10n ** big(scale);  // BigInt division floors
}

// KV-cache bytes of `batch` requests of `seqLen` tokens: each layer kind holds min(S, its cap) tokens.
export function kvBytes(model, dtype, seqLen, batch = 1) {
  const tokens = big(seqLen);
  let perRequest = 0n;
  for (const layers of model.kv[dtype]) {
    const held = layers.cap === null ? tokens : smaller(tokens, big(layers.cap));
    perRequest += held * big(layers.bytes_per_token);
  }
  return perRequest * big(batch);
}

// Requests of `perRequest` bytes that fit `budget` bytes: a floor, never a rounding.
export function maxBatch(budget, perRequest) {
  return budget / perRequest;
}

// The longest S such that `batch` requests of S tokens fit `budget`; 0n if none does, null if
// every layer is capped and the capped cache fits (memory sets no limit then).
export function longestSeqLen(model, dtype, budget, batch = 1) {
  const fits = (seqLen) => kvBytes(model, dtype, seqLen, batch) <= budget;
  if (!fits(1n)) {
    return 0n;
  }
  const layers = model.kv[dtype];
  let tooLong;
  if (layers.some((kind) => kind.cap === null)) {
    tooLong = 2n;
    while (fits(tooLong)) {
      tooLong *= 2n;
    }
  } else {
    tooLong = layers.reduce((most, kind) => (big(kind.cap) > most ? big(kind.cap) : most), 0n) + 1n;
    if (fits(tooLong)) {
      return null;
    }
  }
  let longest = 1n;
  while (tooLong - longest > 1n) {
    const middle = (longest + tooLong) / 2n;
    if (fits(middle)) {
      longest = middle;
    } else {
      tooLong = middle;
    }
  }
  return longest;
}

// Weight bytes as servebook counted them; groups only for INT4 (its checkpoints carry the scales).
export function weightBytes(model, dtype, group = "none") {
  return big(model.weights[dtype][dtype === "int4" ? group : "none"]);
}

// The GPU split into weights, overhead and a KV pool; null where weights and overhead overflow it.
export function capacityPlan(gpu, weights, overhead, perUser) {
  if (weights + overhead > gpu) {
    return null;
  }
  const pool = gpu - weights - overhead;
  const users = maxBatch(pool, perUser);
  return { pool, users, leftover: pool - users * perUser };
}

// ----------------------------------------------------------------------------------- the text

function whole(name, value, least) {
  if (!Number.isSafeInteger(value) || value < least) {
    throw new Error(`${name} must be a whole number >= ${least}, got ${value}`);
  }
  return big(value);
}

function size(name, value, unitBytes, allowZero) {
  if (!Number.isFinite(value) || value < 0 || (value === 0 && !allowZero)) {
    throw new Error(`${name} must be a finite number ${allowZero ? ">=" : ">"} 0, got ${value}`);
  }
  return decimalBytes(value, unitBytes);
}

function grouped(count) {
  return count.toLocaleString("en-US");
}

function decimals(value, places) {
  return value.toLocaleString("en-US", { minimumFractionDigits: places, maximumFractionDigits: 3 });
}

// "800 KiB", "3.125 GiB": bytes in the largest unit of the family they reach.
function inUnit(bytes, family) {
  const units = family === "binary" ? [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]
    : [["GB", 1e9], ["MB", 1e6], ["KB", 1e3]];
  for (const [name, unit] of units) {
    if (bytes >= big(unit)) {
      return `${decimals(Number(bytes) / unit, 0)} ${name}`;
    }
  }
  return `${grouped(bytes)} bytes`;
}

function bothUnits(bytes) {
  if (bytes < 1024n) {
    return `${grouped(bytes)} bytes`;
  }
  return `${grouped(bytes)} bytes = ${inUnit(bytes, "binary")} = ${inUnit(bytes, "decimal")}`;
}

function lines(rows) {
  return rows.map(([label, value]) => label.padEnd(LABEL_WIDTH) + value).join("\n");
}

function findById(list, id, what) {
  const found = list.find((item) => item.id === id);
  if (found === undefined) {
    throw new Error(`unknown ${what} ${id}`);
  }
  return found;
}

function untilTheWindow(model, dtype) {
  const capped = model.kv[dtype].filter((kind) => kind.cap !== null);
  if (capped.length === 0) {
    return "";
  }
  const growing = model.kv[dtype].filter((kind) => kind.cap === null).reduce((n, kind) => n + kind.layers, 0);
  const span = Math.max(...capped.map((kind) => kind.cap));
  return ` while S <= ${grouped(span)}; past it ` +
    (growing ? `only the ${growing} global layers grow` : "the cache stops growing");
}

// The KV-cache calculator's numbers for the reader's inputs (model, seq_len, batch, dtype, budget, unit).
export function kvNumbers(data, inputs) {
  const model = findById(data.models, inputs.model, "model");
  const seqLen = whole("seq len S", inputs.seq_len, 1);
  const batch = whole("batch B", inputs.batch, 1);
  const budget = size(`budget (${inputs.unit})`, inputs.budget, data.units[inputs.unit], false);
  const perRequest = kvBytes(model, inputs.dtype, seqLen);
  return {
    model, seqLen, batch, budget, perRequest,
    perToken: kvBytes(model, inputs.dtype, 1n),
    total: perRequest * batch,
    fits: maxBatch(budget, perRequest),
    longest: longestSeqLen(model, inputs.dtype, budget, batch),
  };
}

function anyLength(model, dtype, batch) {
  const capped = model.kv[dtype];
  const span = Math.max(...capped.map((kind) => kind.cap));
  return `any: every layer is ${capped[0].kind}, so a request's cache stops growing at ${grouped(span)} ` +
    `tokens, and B = ${grouped(batch)} such caches fit`;
}

// Everything the KV-cache calculator shows, as [label, value] rows.
export function kvRows(data, inputs) {
  const { model, seqLen, batch, budget, perToken, perRequest, total, fits, longest } = kvNumbers(data, inputs);
  const short = (bytes) => inUnit(bytes, inputs.unit === "GiB" ? "binary" : "decimal");
  const rows = [
    ["model", `${model.name}: ${model.attention}`],
    ...(model.layer_pattern ? [["layers", model.layer_pattern]] : []),
    ["dtype", `${inputs.dtype}, ${data.kv_dtypes[inputs.dtype]}`],
    ["per token", bothUnits(perToken) + untilTheWindow(model, inputs.dtype)],
    ["per request", `S = ${grouped(seqLen)}: ${bothUnits(perRequest)}`],
    ["batch", `B = ${grouped(batch)}: ${bothUnits(total)}`],
    ["budget", `${inputs.budget} ${inputs.unit} = ${bothUnits(budget)}`],
    ["fits", `${grouped(fits)} requests of S = ${grouped(seqLen)} (${short(budget - fits * perRequest)} ` +
      `left over; request ${grouped(fits + 1n)} would overflow it by ${short((fits + 1n) * perRequest - budget)})`],
    ["your batch", total <= budget ? `B = ${grouped(batch)} fits, with ${short(budget - total)} to spare`
      : `B = ${grouped(batch)} does NOT fit: ${short(total - budget)} over the budget`],
    ["longest S", longest === null ? anyLength(model, inputs.dtype, batch)
      : `${grouped(longest)} tokens per request for B = ${grouped(batch)} within the budget`],
  ];
  if (model.max_seq_len !== null && seqLen > big(model.max_seq_len)) {
    rows.push(["note", `S = ${grouped(seqLen)} is beyond ${model.name}'s context window ` +
      `(${grouped(model.max_seq_len)} tokens)`]);
  }
  return rows;
}

// The text the calculator shows, or why it cannot compute.
export function kvText(data, inputs) {
  try {
    return lines(kvRows(data, inputs));
  } catch (error) {
    return `cannot compute: ${error.message}`;
  }
}

function gpuOf(data, inputs, unitBytes) {
  if (inputs.gpu === "custom") {
    return { bytes: size("gpu_memory", inputs.gpu_memory, unitBytes, false), name: "custom GPU" };
  }
  const gpu = findById(data.gpus, inputs.gpu, "GPU");
  return { bytes: big(gpu.memory), name: `${gpu.name} (${gpu.label} on the datasheet)` };
}

// The planner's numbers for the reader's inputs (model, gpu, gpu_memory, weights, group, overhead,
// seq_len, kv_dtype, unit): the plan with the chosen weights, and the users with each precision.
export function capacityNumbers(data, inputs) {
  const model = findById(data.models, inputs.model, "model");
  if (model.weights === null) {
    throw new Error(`${model.name}: a capacity plan needs the model's parameter count (n_params)`);
  }
  const u = data.units[inputs.unit];
  const gpu = gpuOf(data, inputs, u);
  const overhead = size("overhead", inputs.overhead, u, true);
  if (overhead >= gpu.bytes) {
    throw new Error(`overhead (${inputs.overhead} ${inputs.unit}) must be smaller than the GPU's memory`);
  }
  const perUser = kvBytes(model, inputs.kv_dtype, whole("seq len S", inputs.seq_len, 1));
  const weights = weightBytes(model, inputs.weights, inputs.group);
  const users = {};
  for (const dtype of data.weight_dtypes) {
    const plan = capacityPlan(gpu.bytes, weightBytes(model, dtype, inputs.group), overhead, perUser);
    users[dtype] = plan === null ? null : plan.users;
  }
  return { model, gpu, overhead, perUser, weights, users,
    plan: capacityPlan(gpu.bytes, weights, overhead, perUser) };
}

// Everything the capacity planner shows, as [label, value] rows.
export function capacityRows(data, inputs) {
  const { model, gpu, overhead, perUser, weights, users, plan } = capacityNumbers(data, inputs);
  const units = (bytes) => `${decimals(Number(bytes) / data.units[inputs.unit], 3)} ${inputs.unit}`;
  const groups = inputs.weights === "int4" && inputs.group !== "none" ? ` (groups of ${inputs.group})` : "";
  const layers = model.kv[inputs.kv_dtype];
  const allLayers = layers.reduce((n, kind) => n + kind.layers, 0);
  const capped = layers.filter((kind) => kind.cap !== null).map((kind) =>
    ` (${kind.layers} of ${allLayers} layers ${kind.kind}, at most ${grouped(kind.cap)} tokens each)`).join("");
  const counts = Object.entries(users).map(([dtype, n]) => `${dtype} ${n === null ? "no fit" : grouped(n)}`);
  return [
    ["GPU", `${gpu.name}: ${grouped(gpu.bytes)} bytes = ${units(gpu.bytes)}`],
    ["weights", `${model.name}, ${grouped(model.n_params)} parameters in ${inputs.weights}${groups}: ` +
      units(weights)],
    ...(model.experts ? [["experts", model.experts]] : []),
    ["overhead", units(overhead)],
    ["per user", `S = ${grouped(inputs.seq_len)} tokens of ${inputs.kv_dtype} KV: ${units(perUser)}${capped}`],
    ["plan", plan === null ? `does NOT fit: weights + overhead = ${units(weights + overhead)} > ${units(gpu.bytes)}`
      : `GPU ${units(gpu.bytes)} - weights ${units(weights)} - overhead ${units(overhead)} = KV pool ` +
        `${units(plan.pool)} -> ${grouped(plan.users)} requests of ${units(perUser)} ` +
        `(${units(plan.leftover)} left over)`],
    ["by precision", `${counts.join(" | ")} users`],
  ];
}

// The text the planner shows, or why it cannot compute.
export function capacityText(data, inputs) {
  try {
    return lines(capacityRows(data, inputs));
  } catch (error) {
    return `cannot compute: ${error.message}`;
  }
}
