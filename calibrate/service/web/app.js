// The calibration service's web page: plain JavaScript over the JSON API (/v1/...), no build step.
// Views (by the URL's hash): #/submit, #/jobs, #/jobs/ID (the live view of one job), #/catalogue.
// Every value from the server is put into the page as text (textContent), never as HTML.
"use strict";

(() => {
  const TOKEN_KEY = "calibrate.token";
  const TERMINAL = new Set(["done", "failed", "cancelled"]);
  const LINKS = ["constant", "poisson"];
  const $ = (id) => document.getElementById(id);

  // ------------------------------------------------------------------------------------------
  // Small helpers

  /** An element with attributes/properties and children (strings become text nodes). */
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const isNum = (v) => typeof v === "number" && Number.isFinite(v);

  /** Numbers as people read them: f and errors with one decimal, rates with two, loss in %. */
  const fmt = {
    f: (v) => (isNum(v) ? `${v.toFixed(1)} %` : "–"),
    pct1: (v) => (isNum(v) ? v.toFixed(1) : "–"),
    noise: (v) => (isNum(v) ? ` ± ${v.toFixed(1)}` : ""),
    rate: (v) => (isNum(v) ? v.toFixed(2) : "–"),
    ms: (v) => (isNum(v) ? (Number.isInteger(v) ? String(v) : v.toFixed(1)) : "–"),
    int: (v) => (isNum(v) ? String(Math.round(v)) : "–"),
    /** a loss fraction as a percentage with two significant digits (0.007369 -> 0.74) */
    lossPct: (v) => {
      if (!isNum(v)) return "–";
      if (v === 0) return "0";
      return String(Number((v * 100).toPrecision(2)));
    },
    duration: (s) => {
      if (!isNum(s)) return "–";
      s = Math.max(0, Math.round(s));
      if (s < 60) return `${s} s`;
      const m = Math.floor(s / 60);
      if (m < 60) return `${m} min ${String(s % 60).padStart(2, "0")} s`;
      return `${Math.floor(m / 60)} h ${String(m % 60).padStart(2, "0")} min`;
    },
    date: (iso) => {
      if (!iso) return "–";
      const d = new Date(iso);
      if (Number.isNaN(d.getTime())) return String(iso);
      const p = (n) => String(n).padStart(2, "0");
      return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}`;
    },
  };

  /** An emulator's parameters as the server spells them (emulator.json's keys: summary, events, catalogue). */
  function params(p) {
    if (!p || typeof p !== "object") return null;
    return { rate: p.rate_mbps, delay: p.delay_ms, queue: p.queue_packets, loss: p.uplink_loss };
  }

  /** The error text of a failed request: FastAPI's detail is a sentence or a validation list. */
  function detailText(data, status) {
    const detail = data && data.detail;
    if (typeof detail === "string") return detail;
    if (Array.isArray(detail)) {
      return detail.map((d) => `${(d.loc || []).filter((x) => x !== "body").join(".")}: ${d.msg}`).join("; ");
    }
    return `the server answered ${status}`;
  }

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  function token() {
    return localStorage.getItem(TOKEN_KEY) || "";
  }

  /** The token as the cookie the server reads on GETs (a live view's EventSource, a link to a
   * file, the convergence plot cannot send a header); never sent cross-site, never for a write. */
  function syncTokenCookie() {
    const secure = location.protocol === "https:" ? "; Secure" : "";
    document.cookie = token()
      ? `calibrate_token=${encodeURIComponent(token())}; Path=/; SameSite=Strict${secure}`
      : "calibrate_token=; Path=/; Max-Age=0; SameSite=Strict";
  }

  /** A request to the API; `body` is sent as JSON, or as it is when it is a FormData (an upload). */
  async function api(path, { method = "GET", body } = {}) {
    const headers = { Accept: "application/json" };
    const form = body instanceof FormData;
    if (body !== undefined && !form) headers["Content-Type"] = "application/json";
    if (token()) headers.Authorization = `Bearer ${token()}`; // every request about jobs needs it
    let response;
    try {
      response = await fetch(path, { method, headers, body: body === undefined || form ? body : JSON.stringify(body) });
    } catch (err) {
      throw new ApiError(0, `the server cannot be reached (${err.message})`);
    }
    let data = null;
    try {
      data = await response.json();
    } catch {
      data = null;
    }
    if (!response.ok) {
      let message = detailText(data, response.status);
      if (response.status === 401 || response.status === 403) {
        message = `${message} (check the API token at the top of the page)`;
      }
      throw new ApiError(response.status, message);
    }
    return { status: response.status, data };
  }

  function say(id, text, kind = "") {
    const node = $(id);
    node.textContent = text;
    node.className = `message ${kind}`.trim();
  }

  // ------------------------------------------------------------------------------------------
  // The token

  function showTokenState() {
    const saved = token();
    $("token-state").textContent = saved ? "Token saved in this browser" : "No token: paste one to submit and see your jobs";
    syncTokenCookie();
    $("token-state").className = `token-state ${saved ? "ok" : "warn"}`;
    $("token-clear").hidden = !saved;
  }

  function setupToken() {
    $("token-input").value = token();
    $("token-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const value = $("token-input").value.trim();
      if (value) localStorage.setItem(TOKEN_KEY, value);
      else localStorage.removeItem(TOKEN_KEY);
      showTokenState();
    });
    $("token-clear").addEventListener("click", () => {
      localStorage.removeItem(TOKEN_KEY);
      $("token-input").value = "";
      showTokenState();
    });
    window.addEventListener("storage", (event) => { // saved or forgotten in another tab
      if (event.key !== TOKEN_KEY) return;
      $("token-input").value = token();
      showTokenState();
    });
    showTokenState();
  }

  // ------------------------------------------------------------------------------------------
  // Views and routing

  const views = { submit: "submit-view", jobs: "jobs-view", job: "job-view", catalogue: "catalogue-view" };
  let pollJobs = null;

  function route() {
    const parts = (location.hash || "#/submit").replace(/^#\/?/, "").split("/");
    let view = parts[0] || "submit";
    const id = parts[1] ? decodeURIComponent(parts[1]) : null;
    if (view === "jobs" && id) view = "job";
    if (!(view in views)) view = "submit";
    for (const [name, section] of Object.entries(views)) $(section).hidden = name !== view;
    for (const name of ["submit", "jobs", "catalogue"]) {
      const link = $(`nav-${name}`);
      const current = name === view || (name === "jobs" && view === "job");
      if (current) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    if (view !== "job") closeJob();
    clearInterval(pollJobs);
    pollJobs = null;
    if (view === "jobs") {
      loadJobs();
      pollJobs = setInterval(loadJobs, 5000);
    } else if (view === "job") {
      openJob(id);
    } else if (view === "catalogue") {
      loadCatalogue();
    }
    const heading = $(views[view]).querySelector("h2");
    document.title = `${heading ? heading.textContent.replace(/\s+/g, " ").trim() : "calibrate"} · calibrate`;
  }

  // ------------------------------------------------------------------------------------------
  // Submitting

  function pairs(text, what) {
    const out = {};
    for (const item of text.split(",").map((s) => s.trim()).filter(Boolean)) {
      const at = item.indexOf("=");
      if (at <= 0) throw new Error(`${what}: write NAME=${what.startsWith("Bound") ? "LO:HI" : "VALUE"}, not "${item}"`);
      out[item.slice(0, at).trim()] = item.slice(at + 1).trim();
    }
    return out;
  }

  function submitBody() {
    const target = $("target").value.trim();
    const file = $("archive").files[0];
    if (!target && !file) {
      throw new Error("Name a target (a Pantheon result ID, or a bundled name such as nepal) or upload an archive");
    }
    if (target && file) throw new Error("Give a target or an uploaded archive, not both");
    // every run option is a form field made from its declaration (calibrate/runs/options.py),
    // its data-kind saying how to read it; an empty field is left to the server's default
    const options = {};
    for (const field of document.querySelectorAll("#submit-form [data-option]")) {
      const raw = field.value.trim();
      const label = field.labels[0].textContent;
      if (raw === "") continue;
      const kind = field.dataset.kind;
      let value = raw;
      if (kind === "int" || kind === "float") {
        value = Number(raw);
        if (!Number.isFinite(value)) throw new Error(`${label}: not a number`);
      } else if (kind === "names") {
        value = raw.replace(/\s+/g, "");
      } else if (kind === "fixed") {
        value = Object.fromEntries(Object.entries(pairs(raw, label)).map(([k, v]) => [k, Number(v)]));
      } else if (kind === "bounds") {
        value = Object.fromEntries(Object.entries(pairs(raw, label)).map(([k, v]) => {
          const range = v.split(":").map(Number);
          if (range.length !== 2 || range.some((x) => !Number.isFinite(x))) {
            throw new Error(`${label}: write ${k}=LO:HI, not "${k}=${v}"`);
          }
          return [k, range];
        }));
      }
      options[field.dataset.option] = value;
    }
    for (const key of Object.keys(options)) if (options[key] === undefined) delete options[key];
    const request = { options, force: $("force").checked };
    if (!file) return { target, ...request };
    const form = new FormData(); // multipart: the file as `archive`, the rest as JSON in `request`
    form.append("archive", file, file.name);
    form.append("request", JSON.stringify(request));
    return form;
  }

  function setupSubmit() {
    $("submit-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      let body;
      try {
        body = submitBody();
      } catch (err) {
        say("submit-message", err.message, "error");
        return;
      }
      if (!token()) {
        say("submit-message", "Paste an API token at the top of the page first: submitting needs one.", "error");
        $("token-input").focus();
        return;
      }
      $("submit-button").disabled = true;
      say("submit-message", body instanceof FormData ? "Uploading and submitting…" : "Submitting…");
      try {
        const { data } = await api("/v1/calibrations", { method: "POST", body });
        say("submit-message", data.existing
          ? `The same calibration was already submitted: job ${data.id} (${data.state}).`
          : `Submitted: job ${data.id}.`, "ok");
        location.hash = `#/jobs/${encodeURIComponent(data.id)}`;
      } catch (err) {
        say("submit-message", `Not submitted: ${err.message}`, "error");
      } finally {
        $("submit-button").disabled = false;
      }
    });
  }

  // ------------------------------------------------------------------------------------------
  // The list of jobs

  function progressTotals(progress) {
    let done = 0;
    let budget = 0;
    for (const p of Object.values(progress || {})) {
      done += p.done || 0;
      budget += p.budget || 0;
    }
    return { done, budget };
  }

  function stateBadge(state) {
    return el("span", { class: `badge state-${state}`, text: state });
  }

  function bestF(job) {
    if (job.best && isNum(job.best.f)) return job.best.f;
    const fs = Object.values(job.progress || {}).map((p) => p.best_f).filter(isNum);
    return fs.length ? Math.min(...fs) : null;
  }

  async function loadJobs() {
    const state = $("jobs-state").value;
    try {
      const { data } = await api(`/v1/calibrations${state ? `?state=${encodeURIComponent(state)}` : ""}`);
      const jobs = [...(data.calibrations || [])].sort((a, b) => String(b.created).localeCompare(String(a.created)));
      const body = $("jobs-body");
      body.replaceChildren(...jobs.map((job) => {
        const { done, budget } = progressTotals(job.progress);
        return el("tr", { id: `job-row-${job.id}` },
          el("td", {}, el("a", { class: "job-link mono", href: `#/jobs/${encodeURIComponent(job.id)}`, title: job.id, text: job.id })),
          el("td", { text: job.target }),
          el("td", {}, stateBadge(job.state)),
          el("td", { class: "opts", text: optionsText(job.options, false) }),
          el("td", {}, budget
            ? [el("progress", { max: budget, value: done, "aria-label": `${done} of ${budget} evaluations` }), ` ${done}/${budget}`]
            : "–"),
          el("td", { class: "num", text: fmt.f(bestF(job)) }),
          el("td", { text: fmt.date(job.created) }));
      }));
      $("jobs-empty").hidden = jobs.length > 0;
      say("jobs-message", "");
    } catch (err) {
      say("jobs-message", `Could not list the jobs: ${err.message}`, "error");
    }
  }

  // ------------------------------------------------------------------------------------------
  // One job, live

  const live = { id: null, source: null, poll: null, tick: null, job: null, fetchedAt: 0, pending: null, images: 0,
                 shown: null };

  function closeJob() {
    if (live.source) live.source.close();
    clearInterval(live.poll);
    clearInterval(live.tick);
    clearTimeout(live.pending);
    Object.assign(live, { id: null, source: null, poll: null, tick: null, job: null, pending: null, images: 0,
                          shown: null });
  }

  function resetJobView(id) {
    $("job-id").textContent = id;
    $("job-target").textContent = "…";
    $("job-state").textContent = "loading";
    $("job-state").className = "badge";
    $("job-options").textContent = "";
    $("job-progress").replaceChildren();
    $("job-best-f").textContent = "–";
    $("job-best-link").textContent = "";
    $("job-best-emulator").replaceChildren();
    $("job-best-text").hidden = true;
    $("job-elapsed").textContent = "–";
    $("job-created").textContent = "–";
    $("job-finished").textContent = "–";
    $("job-eta").textContent = "–";
    $("job-cancel").hidden = true;
    $("job-result").hidden = true;
    $("job-figure3-figure").hidden = true;
    $("job-best-heading").textContent = "Best so far";
    $("job-log-item").hidden = true;
    $("job-convergence").hidden = true;
    $("job-convergence").removeAttribute("src");
    $("job-convergence").removeAttribute("data-evaluations");
    $("job-convergence-empty").hidden = false;
    $("job-figure3").removeAttribute("src");
    $("job-schemes-body").replaceChildren();
    say("job-message", "");
  }

  function openJob(id) {
    if (live.id === id) return;
    closeJob();
    live.id = id;
    resetJobView(id);
    refreshJob().then(() => {
      if (live.id !== id || !live.job || TERMINAL.has(live.job.state)) return;
      listen(id);
      live.poll = setInterval(refreshJob, 10000); // in case the event stream drops
    });
    live.tick = setInterval(showTimes, 1000);
  }

  function listen(id) {
    if (typeof EventSource === "undefined") return;
    const source = new EventSource(`/v1/calibrations/${encodeURIComponent(id)}/events`);
    live.source = source;
    source.addEventListener("evaluation", (event) => {
      let record = null;
      try {
        record = JSON.parse(event.data);
      } catch {
        record = null;
      }
      if (record) showRecord(record);
      scheduleRefresh();
    });
    source.addEventListener("state", scheduleRefresh);
    source.addEventListener("end", () => {
      source.close();
      refreshJob();
    });
  }

  /** Events come in bursts (a late client gets the whole journal at once): one fetch per burst. */
  function scheduleRefresh() {
    clearTimeout(live.pending);
    live.pending = setTimeout(refreshJob, 250);
  }

  /** A journal record from the event stream, shown at once (the summary follows). */
  function showRecord(record) {
    if (!live.job || !isNum(record.f)) return;
    const best = live.job.best;
    if (!best || !isNum(best.f) || record.f < best.f) {
      live.job.best = { link: record.link, f: record.f, emulator: record.parameters, text: record.emulator };
      showBest(live.job.best);
    }
  }

  async function refreshJob() {
    const id = live.id;
    if (!id) return;
    let job;
    try {
      ({ data: job } = await api(`/v1/calibrations/${encodeURIComponent(id)}`));
    } catch (err) {
      if (live.id === id) say("job-message", `Could not load job ${id}: ${err.message}`, "error");
      return;
    }
    if (live.id !== id) return;
    live.job = job;
    live.fetchedAt = Date.now();
    showJob(job);
    if (TERMINAL.has(job.state)) {
      if (live.source) live.source.close();
      clearInterval(live.poll);
    }
  }

  /** A job's options in a line: "schemes vegas, saturator · constant · budget 2 · 1 × 3 s". */
  function optionsText(options, full = true) {
    if (!options) return "";
    const list = (v) => (Array.isArray(v) ? v.join(", ") : String(v));
    const parts = [];
    parts.push(options.schemes && list(options.schemes) !== "all" ? `schemes ${list(options.schemes)}` : "all schemes");
    if (options.links) parts.push(list(options.links));
    if (isNum(options.budget)) parts.push(`budget ${options.budget}`);
    if (isNum(options.replicates)) parts.push(`${options.replicates} × ${options.runtime ?? "?"} s`);
    if (full && options.optimizer) parts.push(options.optimizer);
    if (full && isNum(options.seed) && options.seed !== 0) parts.push(`seed ${options.seed}`);
    return parts.join(" · ");
  }

  function showJob(job) {
    $("job-target").textContent = job.target || "?";
    $("job-state").textContent = job.state;
    $("job-state").className = `badge state-${job.state}`;
    $("job-options").textContent = optionsText(job.options);
    if (job.urls && job.urls.log) {
      $("job-log").href = job.urls.log;
      $("job-log-item").hidden = false;
    }
    $("job-cancel").hidden = !(job.state === "queued" || job.state === "running");
    if (job.state === "failed") say("job-message", `Failed: ${job.message || "no reason given"}`, "error");
    else if (job.state === "cancelled") say("job-message", "Cancelled: the calibration was stopped; its journal is kept.", "warn");
    else if (job.state === "queued") say("job-message", "Queued: it starts when an emulator slot frees.", "");
    else say("job-message", job.message || "");
    showProgress(job);
    $("job-best-heading").textContent = job.state === "done" ? "Winner" : "Best so far";
    if (job.best) showBest(job.best);
    else $("job-best-link").textContent = "No evaluation has finished yet.";
    showTimes();
    showConvergence(job);
    showResult(job);
  }

  function showProgress(job) {
    const progress = job.progress || {};
    const kinds = [...LINKS.filter((k) => k in progress), ...Object.keys(progress).filter((k) => !LINKS.includes(k))];
    if (!kinds.length) {
      $("job-progress").replaceChildren(el("p", { class: "empty", text: "No evaluation yet." }));
      return;
    }
    $("job-progress").replaceChildren(...kinds.map((kind) => {
      const p = progress[kind];
      const text = `${p.done ?? 0}/${p.budget ?? "?"}`;
      return el("div", { class: "progress-row", id: `progress-${kind}` },
        el("span", { class: "link-name", text: kind }),
        el("progress", { id: `progress-${kind}-bar`, max: p.budget || 1, value: p.done || 0,
                         "aria-label": `${kind}: ${p.done ?? 0} of ${p.budget ?? "?"} evaluations` }),
        el("span", { class: "count", id: `progress-${kind}-text`, text }),
        el("span", { class: "best-f", text: isNum(p.best_f) ? `best ${fmt.f(p.best_f)}` : "" }),
        p.stopped && p.stopped !== "budget"
          ? el("span", { class: "stopped", text: `stopped early: ${String(p.stopped).replace(/_/g, " ")}` }) : null);
    }));
  }

  function showBest(best) {
    $("job-best-f").textContent = isNum(best.f) ? `${best.f.toFixed(1)} %${fmt.noise(best.noise)}` : "–";
    $("job-best-link").textContent = best.link ? `${best.link} link` : "";
    const p = params(best.emulator);
    if (p) {
      const rows = [["Rate", `${fmt.rate(p.rate)} Mbit/s`], ["Delay", `${fmt.ms(p.delay)} ms one-way`],
                    ["Queue", `${fmt.int(p.queue)} packets`], ["Loss", `${fmt.lossPct(p.loss)} %`]];
      $("job-best-emulator").replaceChildren(...rows.map(([k, v]) => el("div", {}, el("dt", { text: k }), el("dd", { text: v }))));
    }
    $("job-best-text").textContent = best.text || "";
    $("job-best-text").hidden = !best.text;
  }

  function showTimes() {
    const job = live.job;
    if (!job) return;
    $("job-created").textContent = fmt.date(job.created);
    $("job-finished-label").textContent = job.state === "cancelled" ? "Cancelled" : job.state === "failed" ? "Failed" : "Finished";
    $("job-finished").textContent = job.finished ? fmt.date(job.finished) : "–";
    const running = job.state === "running";
    const since = running ? (Date.now() - live.fetchedAt) / 1000 : 0;
    $("job-elapsed").textContent = isNum(job.elapsed_s) ? fmt.duration(job.elapsed_s + since) : "–";
    if (TERMINAL.has(job.state)) $("job-eta").textContent = job.state === "done" ? "finished" : "–";
    else if (isNum(job.eta_s)) $("job-eta").textContent = `about ${fmt.duration(Math.max(0, job.eta_s - since))}`;
    else $("job-eta").textContent = job.state === "queued" ? "waiting for a slot" : "estimating…";
  }

  function showConvergence(job) {
    const { done } = progressTotals(job.progress);
    if (!done || done === live.images) return;
    live.images = done;
    const img = $("job-convergence");
    const url = `/v1/calibrations/${encodeURIComponent(job.id)}/convergence.png?n=${done}`;
    const next = new Image();
    next.onload = () => {
      if (live.id !== job.id) return;
      img.src = next.src;
      img.hidden = false;
      img.dataset.evaluations = String(done);
      $("job-convergence-empty").hidden = true;
    };
    next.onerror = () => {
      if (live.images === done) live.images = 0; // try again with the next summary
    };
    next.src = url;
  }

  function schemeRows(job) {
    let rows = job.schemes;
    if (rows && !Array.isArray(rows) && typeof rows === "object") {
      rows = rows[(job.best && job.best.link) || Object.keys(rows)[0]] || [];
    }
    return Array.isArray(rows) ? rows : [];
  }

  function showResult(job) {
    if (job.state !== "done") {
      $("job-result").hidden = true;
      $("job-figure3-figure").hidden = true;
      return;
    }
    if (live.shown === job.id) return; // a finished job's result does not change
    live.shown = job.id;
    const base = `/v1/calibrations/${encodeURIComponent(job.id)}`;
    const figure = $("job-figure3");
    const src = `${base}/files/figure3.png`;
    if (figure.getAttribute("src") !== src) figure.src = src;
    $("job-figure3-link").href = src;
    $("job-download-mahimahi").href = `${base}/files/mahimahi.txt`;
    $("job-download-report").href = `${base}/files/emulator.json`;
    $("job-download-figure").href = `${base}/files/figure3.svg`;
    $("job-download-export").href = (job.urls && job.urls.export) || `${base}/export`;
    $("job-schemes-body").replaceChildren(...schemeRows(job).map((row) => {
      // the export and the journal spell a scheme's numbers alike: {tput, delay, loss}
      const real = row.real || null;
      const emu = row.emulated || null;
      const err = row.error_pct && typeof row.error_pct === "object" ? row.error_pct : {};
      const failed = !emu;
      return el("tr", { class: failed ? "failed" : "" },
        el("th", { scope: "row", text: row.scheme }),
        el("td", { class: "mono", text: row.ran_as || "" }),
        el("td", { text: row.flow || "all" }),
        el("td", { class: "num group-start", text: fmt.rate(real && real.tput) }),
        el("td", { class: "num", text: failed ? "failed" : fmt.rate(emu.tput) }),
        el("td", { class: "num group-start", text: fmt.pct1(real && real.delay) }),
        el("td", { class: "num", text: failed ? "–" : fmt.pct1(emu.delay) }),
        el("td", { class: "num group-start", text: fmt.lossPct(real && real.loss) }),
        el("td", { class: "num", text: failed ? "–" : fmt.lossPct(emu.loss) }),
        el("td", { class: "num group-start", text: fmt.pct1(err.tput) }),
        el("td", { class: "num", text: fmt.pct1(err.delay) }));
    }));
    $("job-result").hidden = false;
    $("job-figure3-figure").hidden = false;
  }

  function setupJob() {
    $("job-cancel").addEventListener("click", async () => {
      const id = live.id;
      if (!id) return;
      if (!token()) {
        say("job-message", "Paste an API token at the top of the page first: cancelling needs one.", "error");
        return;
      }
      if (!window.confirm(`Cancel calibration ${id}? Its finished evaluations stay in the journal.`)) return;
      $("job-cancel").disabled = true;
      try {
        const { data } = await api(`/v1/calibrations/${encodeURIComponent(id)}`, { method: "DELETE" });
        if (live.id === id) {
          live.job = data;
          live.fetchedAt = Date.now();
          showJob(data);
        }
      } catch (err) {
        say("job-message", `Not cancelled: ${err.message}`, "error");
      } finally {
        $("job-cancel").disabled = false;
      }
    });
  }

  // ------------------------------------------------------------------------------------------
  // The catalogue

  const catalogue = { entries: [], key: "f", dir: 1 };

  function sortValue(entry, key) {
    const p = params(entry.parameters) || {};
    switch (key) {
      case "rate": case "delay": case "queue": case "loss": return p[key];
      case "f": return entry.f;
      case "date": return entry.date ? Date.parse(entry.date) : undefined;
      default: return (entry[key] ?? "").toString().toLowerCase();
    }
  }

  function showCatalogue() {
    const query = $("catalogue-filter").value.trim().toLowerCase();
    const link = $("catalogue-link").value;
    const { key, dir } = catalogue;
    const shown = catalogue.entries.filter((e) => {
      if (link && e.link !== link) return false;
      if (!query) return true;
      const p = e.parameters ? Object.values(e.parameters).join(" ") : "";
      return [e.target, e.description, e.link, e.id, p].join(" ").toLowerCase().includes(query);
    }).sort((a, b) => {
      const x = sortValue(a, key);
      const y = sortValue(b, key);
      if (x === undefined || x === null) return 1; // unknowns last either way
      if (y === undefined || y === null) return -1;
      return (x < y ? -1 : x > y ? 1 : 0) * dir;
    });
    $("catalogue-body").replaceChildren(...shown.map((e) => {
      const p = params(e.parameters) || {};
      const urls = e.urls || {};
      return el("tr", { id: `emulator-row-${e.id}` },
        el("td", {}, el("a", { href: `#/jobs/${encodeURIComponent(e.id)}`, title: `job ${e.id}`, text: e.target })),
        el("td", { class: "desc", text: e.description || "–" }),
        el("td", { text: e.link }),
        el("td", { class: "num", text: fmt.rate(p.rate) }),
        el("td", { class: "num", text: fmt.ms(p.delay) }),
        el("td", { class: "num", text: fmt.int(p.queue) }),
        el("td", { class: "num", text: fmt.lossPct(p.loss) }),
        el("td", { class: "num", text: `${fmt.pct1(e.f)}${fmt.noise(e.noise)}` }),
        el("td", { text: fmt.date(e.date) }),
        el("td", { class: "links" },
          el("a", { class: "download-mahimahi", id: `download-mahimahi-${e.id}`, href: urls.mahimahi, download: "mahimahi.txt",
                    text: "Mahimahi", "aria-label": `Mahimahi command for ${e.target} (${e.link})` }),
          el("a", { class: "download-bundle", id: `download-bundle-${e.id}`, href: urls.bundle, download: true,
                    text: "Bundle (.zip)", "aria-label": `Bundle with traces for ${e.target} (${e.link})` })));
    }));
    $("catalogue-empty").hidden = shown.length > 0;
    for (const button of document.querySelectorAll("#catalogue-table button.sort")) {
      const th = button.closest("th");
      th.setAttribute("aria-sort", button.dataset.key === key ? (dir > 0 ? "ascending" : "descending") : "none");
    }
  }

  async function loadCatalogue() {
    try {
      const { data } = await api("/v1/emulators");
      catalogue.entries = data.emulators || [];
      showCatalogue();
      say("catalogue-message", "");
    } catch (err) {
      say("catalogue-message", `Could not load the catalogue: ${err.message}`, "error");
    }
  }

  function setupCatalogue() {
    for (const button of document.querySelectorAll("#catalogue-table button.sort")) {
      button.addEventListener("click", () => {
        const key = button.dataset.key;
        if (catalogue.key === key) catalogue.dir = -catalogue.dir;
        else Object.assign(catalogue, { key, dir: key === "date" ? -1 : 1 });
        showCatalogue();
      });
    }
    $("catalogue-filter").addEventListener("input", showCatalogue);
    $("catalogue-link").addEventListener("change", showCatalogue);
    $("catalogue-refresh").addEventListener("click", loadCatalogue);
  }

  // ------------------------------------------------------------------------------------------

  document.addEventListener("DOMContentLoaded", () => {
    setupToken();
    setupSubmit();
    setupJob();
    setupCatalogue();
    $("jobs-state").addEventListener("change", loadJobs);
    $("jobs-refresh").addEventListener("click", loadJobs);
    window.addEventListener("hashchange", route);
    route();
  });
})();
