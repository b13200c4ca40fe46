/* OCMS live console: polls the worker's HTTP API and draws it (uPlot for the trend, SVG bars).
 *
 * Read-only. It speaks the worker's metric names: the metric listing
 * (/metrics?format=json), then per metric /metrics/NAME/topk, /trend and, for
 * version=combined, /estimates; /discovered?metric=NAME for a discoverable
 * metric; /console/truth?metric=NAME for a simulated fleet's truth. Every answer
 * is shown as the API gave it (numbers are not re-estimated here); tables carry
 * the exact API numbers in data-raw attributes next to their formatted text.
 * Values are names (the API's rule: every value is a JSON string; numbers are
 * tolerated).
 *
 * Times: one format, the browser's locale and time zone (Intl.DateTimeFormat),
 * everywhere (axis, tables, freshness, "updated"). Rates: reports/s between
 * two listings, over the worker's clock (the listing's generated_at), never the
 * browser's (a headless screenshot under virtual time runs that one fast).
 * The view (metric, version, options, trend values) lives in the page's
 * address, so a reload or a shared link shows the same view.
 */
(function () {
  "use strict";

  var MAX_TREND_VALUES = 5;
  var TREND_POINTS_TARGET = 120;
  var TREND_REFRESH_MS = 10000;
  var TRUTH_REFRESH_MS = 5000;
  /** Reports/s: over this many seconds of listings (the worker's clock). */
  var RATE_WINDOW_S = 30;
  var DISCOVERED_REFRESH_MS = 5000;
  /** "fit the data": since the oldest bucket holding reports, at most this long (or 3 buckets). */
  var AUTO_RANGE_MAX_S = 900;
  var COMBINED = "combined";
  var COLORS = ["#1f5fa8", "#b8470b", "#2a7f3f", "#7b3fa0", "#8a6d00"];
  var TRUTH_COLOR = "#e07b00";
  /** URL keys of the view, and the defaults left out of the address. */
  var VIEW_DEFAULTS = { k: "10", postprocess: "none", window: "total", range: "auto", refresh: "2000" };

  var state = {
    listing: null,         // last /metrics?format=json document
    selected: null,        // name of the shown metric
    version: null,         // shown version of it: "1", "2" ... or "combined"
    health: null,
    rates: {},             // metric name -> [{t, n}] samples for reports/s (t: the worker's clock, s)
    lastChange: {},        // metric name -> worker time (s) the report count last grew
    truth: null,           // last /console/truth answer for the shown metric
    histogram: null,       // a numeric version's last /histogram answer (its quantiles and mean)
    truthKey: null, truthFetched: 0,
    top: null,             // last top-K document (a /topk answer, or built from a combined /estimates)
    topRows: [],
    trendValues: [],       // value names chosen for the trend
    trendChosenByUser: false,
    trend: {},
    discovered: null, discoveredKey: null, discoveredFetched: 0,
    wanted: null,          // the view asked for by the address, applied once the listing is known
    timer: null,
    polling: false,
    charts: {},
  };

  // ------------------------------------------------------------ helpers
  function $(id) { return document.getElementById(id); }

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    setAttrs(node, attrs);
    (children || []).forEach(function (c) { if (c != null) node.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
    return node;
  }

  var SVG_NS = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, children) {
    var node = document.createElementNS(SVG_NS, tag);
    setAttrs(node, attrs);
    (children || []).forEach(function (c) { if (c != null) node.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
    return node;
  }

  function setAttrs(node, attrs) {
    if (!attrs) return;
    Object.keys(attrs).forEach(function (key) {
      if (attrs[key] == null) return;
      if (key === "text") node.textContent = attrs[key];
      else if (key === "class") node.setAttribute("class", attrs[key]);
      else node.setAttribute(key, attrs[key]);
    });
  }

  function num(x) { var v = typeof x === "string" ? Number(x) : x; return typeof v === "number" && isFinite(v) ? v : null; }
  function pct(x) { var v = num(x); return v == null ? "–" : (v * 100).toFixed(2) + " %"; }
  function int(x) { var v = num(x); return v == null ? "–" : Math.round(v).toLocaleString("en-US"); }
  function str(v) { return v == null ? "" : String(v); }
  function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }

  function ago(seconds) {
    var s = Math.max(0, Math.round(seconds));
    if (s < 60) return s + " s ago";
    if (s < 3600) return Math.round(s / 60) + " min ago";
    return (s / 3600).toFixed(1) + " h ago";
  }

  function duration(seconds) {
    if (seconds % 86400 === 0) return plural(seconds / 86400, "day");
    if (seconds % 3600 === 0) return seconds / 3600 + " h";
    if (seconds % 60 === 0) return seconds / 60 + " min";
    return seconds + " s";
  }

  // One time format everywhere: the browser's locale and time zone.
  var TIME = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  var DATE_TIME = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "short", day: "numeric",
    hour: "2-digit", minute: "2-digit", second: "2-digit" });
  var AXIS_TIME = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });
  var AXIS_DATE_TIME = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  var TIME_ZONE = TIME.resolvedOptions().timeZone || "local time";
  /** A time of day (seconds since the epoch); with the date when it is not today's. */
  function timeText(seconds) {
    var d = new Date(seconds * 1000);
    return d.toDateString() === new Date(serverNow() * 1000).toDateString() ? TIME.format(d) : DATE_TIME.format(d);
  }

  /** The worker's clock (s): the last listing's generated_at; the browser's before the first one. */
  function serverNow() {
    var t = state.listing && num(state.listing.generated_at);
    return t != null ? t : Date.now() / 1000;
  }

  /** A worker with --api-tokens-file answers 401 without a read token: asked once per page, kept for the tab. */
  var TOKEN_KEY = "ocms-read-token", tokenAsked = false;
  function readHeaders() {
    var headers = { Accept: "application/json" }, token = null;
    try { token = window.sessionStorage.getItem(TOKEN_KEY); } catch (e) { token = null; }
    if (token) headers.Authorization = "Bearer " + token;
    return headers;
  }

  /** GET a JSON answer: {status, doc} or {status: 0, error} when unreachable. Never throws. */
  function api(path) {
    var controller = new AbortController();
    var timeout = setTimeout(function () { controller.abort(); }, 8000);
    return fetch(path, { signal: controller.signal, headers: readHeaders(), cache: "no-store" })
      .then(function (response) {
        if (response.status === 401 && !tokenAsked && typeof window.prompt === "function") {
          tokenAsked = true;
          var token = window.prompt("This worker needs a read token (its --api-tokens-file):");
          if (token) {
            try { window.sessionStorage.setItem(TOKEN_KEY, token.trim()); } catch (e) { /* private mode */ }
            clearTimeout(timeout);
            return api(path);
          }
        }
        return response.text().then(function (text) {
          var doc = null;
          try { doc = text ? JSON.parse(text) : null; } catch (e) { doc = null; }
          if (doc === null && response.ok) return { status: response.status, error: "the answer is not JSON" };
          return { status: response.status, doc: doc, error: response.ok ? null : errorText(response, doc) };
        });
      })
      .catch(function (e) {
        return { status: 0, error: e && e.name === "AbortError" ? "no answer within 8 s" : "cannot reach the worker (" + (e && e.message || e) + ")" };
      })
      .finally(function () { clearTimeout(timeout); });
  }

  function errorText(response, doc) {
    var text = response.status + " " + (response.statusText || "");
    if (doc && doc.error) text += ": " + (doc.parameter ? doc.parameter + ": " : "") + doc.error;
    return text.trim();
  }

  function query(params) {
    return Object.keys(params).filter(function (k) { return params[k] != null && params[k] !== ""; })
      .map(function (k) { return encodeURIComponent(k) + "=" + encodeURIComponent(params[k]); }).join("&");
  }

  // ---------------------------------------------------------- view in the URL
  /** The view the address asks for: {metric, version, k, postprocess, window, range, step, values, refresh}. */
  function readView() {
    var params = new URLSearchParams(location.search);
    var view = {};
    ["metric", "version", "k", "postprocess", "window", "range", "step", "refresh"].forEach(function (key) {
      if (params.has(key)) view[key] = params.get(key);
    });
    if (params.has("value")) view.values = params.getAll("value");
    return view;
  }

  /** Write the shown view into the address (replaceState: no history entry per click). */
  function writeView() {
    if (!state.selected) return;
    var params = new URLSearchParams();
    params.set("metric", state.selected);
    if (state.version != null && !(current() && newest(current()) && String(newest(current()).version) === state.version)) {
      params.set("version", state.version);
    }
    [["k", $("k").value], ["postprocess", $("postprocess").value], ["window", $("window").value],
     ["range", $("range").value], ["refresh", $("poll").value]].forEach(function (pair) {
      if (pair[1] != null && pair[1] !== VIEW_DEFAULTS[pair[0]]) params.set(pair[0], pair[1]);
    });
    if ($("step").getAttribute("data-chosen") === "true") params.set("step", $("step").value);
    if (state.trendChosenByUser) state.trendValues.forEach(function (v) { params.append("value", v); });
    var search = "?" + params.toString();
    if (search !== location.search) history.replaceState(history.state, "", location.pathname + search + location.hash);
  }

  /** Set a select to a value it offers; false when it offers none such. */
  function choose(select, value) {
    if (value == null) return false;
    var ok = Array.prototype.some.call(select.options, function (o) { return o.value === String(value) && !o.disabled; });
    if (ok) select.value = String(value);
    return ok;
  }

  /** The address's options that need no listing: top-K and trend options, refresh. */
  function applyWantedOptions(view) {
    var ignored = [];
    [["k", "k"], ["postprocess", "postprocess"], ["window", "window"], ["range", "range"], ["refresh", "poll"]].forEach(function (pair) {
      if (view[pair[0]] != null && !choose($(pair[1]), view[pair[0]])) ignored.push(pair[0] + "=" + view[pair[0]]);
    });
    return ignored;
  }

  // --------------------------------------------------------- metric facts
  function metrics() { return (state.listing && state.listing.metrics) || []; }
  function find(name) {
    var all = metrics();
    for (var i = 0; i < all.length; i++) if (all[i].name === name) return all[i];
    return null;
  }
  function current() { return find(state.selected); }
  function versionsOf(m) { return (m && m.versions) || []; }
  function newest(m) { var v = versionsOf(m); return v.length ? v[v.length - 1] : null; }
  function isCombined() { return state.version === COMBINED; }
  /** A version reported as a hierarchical histogram (issue 40: the listing holds its hierarchy): its distribution is
   *  its /histogram, the consistent tree of every level; its /topk and /estimates answer its finest level alone. */
  function isTree() { var v = currentVersion(); return !isCombined() && !!(v && v.hierarchy); }

  /** The version document shown: the chosen one; for "combined" the newest (what trends read). */
  function currentVersion() {
    var m = current();
    if (!m) return null;
    var all = versionsOf(m);
    for (var i = 0; i < all.length; i++) if (String(all[i].version) === state.version) return all[i];
    return newest(m);
  }

  function discoverable(m) { return versionsOf(m).some(function (v) { return v.discoverable === true; }); }

  function versionLabel(m) {
    if (!m) return "";
    if (isCombined()) return m.name + " (versions " + versionsOf(m).map(function (v) { return v.version; }).join(" + ") + " combined)";
    var v = currentVersion();
    return v && versionsOf(m).length > 1 ? m.name + " v" + v.version : m.name;
  }

  var MECHANISMS = {
    ocms: "OCMS+RR (count-mean sketch with randomized response)",
    direct: "direct randomized response (k-RR)",
  };

  var SHORT_MECHANISMS = { ocms: "OCMS+RR", direct: "direct RR" };

  /** Issue 38: a longitudinal metric's two budgets (memoized two-round reports). */
  function longitudinalWords(l) {
    return ". Longitudinal reporting: a device randomizes its (hashed) value once and keeps that memoized answer for " +
      "life, re-randomizing it for each report, so all its reports of one value together reveal at most ε∞ = " +
      num(l.lifetime_epsilon) + " (at most " + num(l.max_lifetime_epsilon) + " per device whatever its values do), " +
      "while one report reveals ε = " + num(l.epsilon_per_report) + ". Its reports stay linkable to each other" +
      (str(l.mechanism) === "ocms" ? " by their fixed hash" : "") + ", and a change of value shows in them.";
  }

  function mechanism(v, short) {
    var name = v.mechanism == null ? "ocms" : str(v.mechanism);
    var text = (short ? SHORT_MECHANISMS : MECHANISMS)[name] || name;
    if (!v.mode) return text;
    if (short) return text + " (" + (v.mode === "l2" ? "L2" : v.mode === "mse" ? "MSE" : v.mode) + ")";
    return text + ", tuned for " + (v.mode === "l2" ? "L2 loss" : v.mode === "mse" ? "worst-case MSE" : v.mode);
  }

  /** A number for a label: at most 4 significant digits, no trailing zeros. */
  function shortNumber(x) { return String(Number(Number(x).toPrecision(4))); }

  /** A numeric metric's bucket (its values are bucket indices) as the range it holds, Prometheus-style
   *  "(5, 10] ms"; null for any other metric or a value that is not a bucket index. */
  function numericLayout() { var v = currentVersion(); return v && v.numeric && Array.isArray(v.numeric.bounds) ? v.numeric : null; }

  function bucketRange(value) {
    var m = current(), layout = numericLayout();
    var i = Number(value);
    if (!layout || !Number.isInteger(i) || i < 0 || i > layout.bounds.length) return null;
    var edges = [layout.lower].concat(layout.bounds, [layout.upper]);
    var unit = m && m.unit ? " " + m.unit : "";
    return (i === 0 ? "[" : "(") + shortNumber(edges[i]) + ", " + shortNumber(edges[i + 1]) + "]" + unit;
  }

  /** Display name of a value: its name; a numeric metric's bucket, its range; with a truth file naming it
   *  otherwise (a legacy worker's integer ids), "ATL (4)". */
  function valueLabel(value) {
    var v = str(value);
    var range = bucketRange(value);
    if (range != null) return range;
    var t = truthFor(current());
    if (t && t.labels[v] != null && t.labels[v] !== v) return t.labels[v] + " (" + v + ")";
    return v;
  }

  /** The shortest name of a value (for chart labels): its name alone when it has one. */
  function valueName(value) {
    var full = valueLabel(value), v = str(value);
    var suffix = " (" + v + ")";
    return full.length > suffix.length && full.slice(-suffix.length) === suffix ? full.slice(0, -suffix.length) : full;
  }

  /** The truth documents of the last /console/truth answer (an old single document is one of them). */
  function truths() {
    var t = state.truth;
    if (!t || !t.available) return [];
    if (Array.isArray(t.truths)) return t.truths;
    return t.counts ? [t] : [];
  }

  function indexTruth(t) {
    if (!t._index) {
      t._index = { freq: {}, labels: {}, reports: num(t.reports) || 0 };
      (t.counts || []).forEach(function (c) {
        var f = t._index.reports ? c.count / t._index.reports : 0;
        t._index.freq[str(c.value)] = f;
        t._index.labels[str(c.value)] = str(c.label != null ? c.label : c.value);
        // A registry worker answers values by name (ATL, not its id 4): index the name too.
        if (c.label != null && t._index.freq[str(c.label)] == null) t._index.freq[str(c.label)] = f;
      });
    }
    return t._index;
  }

  /** The truth of the simulated fleet for metric m, indexed by value and by value name, or null.
   *  It belongs to m when its fingerprint is one of m's shown versions (combined: any of them). */
  function truthFor(m) {
    var t = truthDocFor(m);
    return t ? indexTruth(t) : null;
  }

  /** The truth document of the simulated fleet for metric m (as /console/truth gave it), or null. */
  function truthDocFor(m) {
    if (!m) return null;
    var fps = isCombined() ? versionsOf(m).map(function (v) { return v.fingerprint; })
      : [currentVersion() && currentVersion().fingerprint];
    var all = truths();
    for (var i = 0; i < all.length; i++) {
      var t = all[i];
      if (t.discovery) continue;
      if (t.metric && t.metric !== m.name) continue;
      if (t.fingerprint && fps.indexOf(t.fingerprint) < 0) continue;
      return t;
    }
    return null;
  }

  /** The truth of a discovery fleet of metric m (its values' true frequencies), or null. */
  function discoveryTruthFor(m) {
    if (!m) return null;
    var all = truths();
    for (var i = 0; i < all.length; i++) if (all[i].discovery && all[i].metric === m.name) return indexTruth(all[i]);
    return null;
  }

  // --------------------------------------------------------------- states
  function banner(kind, text) {
    var b = $("banner");
    if (!text) { b.hidden = true; b.textContent = ""; b.className = "banner"; return; }
    b.hidden = false; b.className = "banner banner-" + kind; b.textContent = text;
  }

  function metricState(kind, text) {
    var s = $("metric-state");
    if (!text) { s.hidden = true; s.textContent = ""; s.removeAttribute("data-state"); return; }
    s.hidden = false; s.className = "state state-" + kind; s.setAttribute("data-state", kind); s.textContent = text;
  }

  function setHealth(kind, text) {
    var h = $("health");
    h.className = "pill pill-" + kind; h.textContent = text; h.setAttribute("data-state", kind);
  }

  // ---------------------------------------------------------------- poll
  function schedule() {
    clearTimeout(state.timer);
    var every = Number($("poll").value);
    // A hidden tab does not poll (the worker's query thread is shared); it catches up when shown.
    if (every > 0 && !document.hidden) state.timer = setTimeout(poll, every);
  }

  function poll() {
    if (state.polling) return Promise.resolve();
    state.polling = true;
    return refresh().catch(function (e) {
      banner("error", "The console failed to draw an answer: " + (e && e.message || e));
    }).finally(function () { state.polling = false; schedule(); });
  }

  function refresh() {
    return api("/healthz").then(function (health) {
      if (health.status === 0) {
        setHealth("error", "unreachable");
        banner("error", "Cannot reach the worker API at " + location.origin + ": " + health.error + ". Retrying.");
        return;
      }
      state.health = health.doc;
      var starting = health.status === 503;
      if (starting) {
        var lag = health.doc && health.doc.view_lag_messages;
        setHealth("wait", "starting");
        banner("wait", "The worker is starting: its view of the counts is catching up" +
          (lag ? " (" + int(lag) + " changelog records behind)" : "") + ". Estimates appear when it is ready.");
      } else if (health.status !== 200) {
        setHealth("error", "error");
        banner("error", "The worker's health check answered " + health.error + ".");
      } else {
        setHealth("ok", "ready");
        banner(null);
      }
      return api("/metrics?format=json").then(function (listing) {
        if (listing.status !== 200 || !listing.doc || !Array.isArray(listing.doc.metrics)) {
          if (listing.status === 503) {
            setHealth("wait", "starting");
            banner("wait", "The worker is starting (the API answered 503: " + (listing.error || "") + "). Retrying.");
          } else {
            banner("error", "The API answered an error for the metric listing /metrics?format=json: " +
              (listing.error || "no metrics list in the answer") + ". Retrying.");
          }
          return;
        }
        state.listing = listing.doc;
        noteRates();
        if (state.wanted) applyWantedMetric();
        if (!state.selected || !current()) chooseMetric(metrics()[0] ? metrics()[0].name : null);
        else if (!isCombined() && !versionsOf(current()).some(function (v) { return String(v.version) === state.version; })) {
          state.version = newest(current()) ? String(newest(current()).version) : null;  // a version retired
        } else if (isCombined() && versionsOf(current()).length < 2) {
          state.version = newest(current()) ? String(newest(current()).version) : null;
        }
        renderMetrics();
        renderMetricSelect();
        renderVersions();
        renderParams();
        renderSteps();
        writeView();
        if (starting) {
          metricState("wait", "Waiting for the worker to finish starting.");
          return;
        }
        return Promise.all([refreshMetric(), refreshDiscovered()]);
      });
    }).then(function () {
      $("updated").textContent = "updated " + TIME.format(new Date());
    });
  }

  /** The address's metric, version and trend values, once the listing names the metrics. */
  function applyWantedMetric() {
    var view = state.wanted;
    state.wanted = null;
    var notes = view.ignored || [];
    if (view.metric != null) {
      if (find(view.metric)) chooseMetric(view.metric);
      else notes.push("metric=" + view.metric + " (not served by this worker)");
    }
    var m = current();
    if (m && view.version != null) {
      var ok = view.version === COMBINED ? versionsOf(m).length > 1
        : versionsOf(m).some(function (v) { return String(v.version) === view.version; });
      if (ok) state.version = view.version;
      else notes.push("version=" + view.version + " (not a live version of " + m.name + ")");
    }
    if (m && view.values && view.values.length) {
      state.trendValues = view.values.slice(0, MAX_TREND_VALUES);
      state.trendChosenByUser = true;
    }
    if (view.step != null) state.wantedStep = view.step;
    if (notes.length) linkNote("The page's address asked for " + notes.join(", ") + "; showing the defaults instead.");
  }

  /** What of the page's address could not be shown (until the view is changed). */
  function linkNote(text) {
    var note = $("link-note");
    note.hidden = !text; note.textContent = text || "";
  }

  function chooseMetric(name) {
    state.selected = name;
    var v = newest(current());
    state.version = v ? String(v.version) : null;  // devices report the newest live version
    state.trendValues = []; state.trendChosenByUser = false; state.trend = {}; state.trendKey = null;
    state.discovered = null; state.discoveredKey = null; state.truthKey = null;
    $("step").removeAttribute("data-chosen");
  }

  function noteRates() {
    var now = serverNow();
    metrics().forEach(function (m) {
      var samples = state.rates[m.name] || (state.rates[m.name] = []);
      var n = num(m.reports) || 0;
      var last = samples[samples.length - 1];
      if (last && now <= last.t) return;  // the same listing again (or a clock step back): no new sample
      if (!last || n > last.n) state.lastChange[m.name] = last ? now : state.lastChange[m.name] || null;
      samples.push({ t: now, n: n });
      while (samples.length > 2 && now - samples[0].t > RATE_WINDOW_S) samples.shift();
    });
  }

  /** Reports/s over the last RATE_WINDOW_S of the worker's clock; null until two listings are apart.
   *  The count grows in steps (one per micro-batch checkpoint), so the rate is taken between the first
   *  and the last listing where it grew: a window cut in the middle of two steps would over- or
   *  under-count by a whole batch. A count that stopped growing brings the rate down to the present. */
  function rateOf(name) {
    var s = state.rates[name] || [];
    if (s.length < 2) return null;
    var first = s[0], last = s[s.length - 1];
    var steps = s.filter(function (x, i) { return i > 0 && x.n > s[i - 1].n; });
    if (steps.length >= 2) {
      var a = steps[0], b = steps[steps.length - 1];
      var usual = (b.t - a.t) / (steps.length - 1);
      if (last.t - b.t <= 2 * usual + 2) return Math.max(0, (b.n - a.n) / (b.t - a.t));
      return Math.max(0, (last.n - a.n) / (last.t - a.t));
    }
    return last.t > first.t ? Math.max(0, (last.n - first.n) / (last.t - first.t)) : null;
  }

  function metricPath(m, endpoint) { return "/metrics/" + encodeURIComponent(m.name) + "/" + endpoint; }

  /** The top values of the shown metric and version: /topk, or for "combined" the combined
   *  /estimates sorted by estimate (the API answers combined estimates, not a combined top-K). */
  function fetchTop(m, k) {
    if (isTree()) return fetchTreeTop(m);
    if (!isCombined()) {
      return api(metricPath(m, "topk") + "?" + query({ version: state.version, k: k,
        postprocess: $("postprocess").value, window: $("window").value }));
    }
    return api(metricPath(m, "estimates") + "?" + query({ version: COMBINED, window: $("window").value }))
      .then(function (answer) {
        if (answer.status !== 200 || !answer.doc) return answer;
        var doc = answer.doc, records = (doc.estimates || []).slice();
        records.sort(function (a, b) { return (num(b.frequency) || -Infinity) - (num(a.frequency) || -Infinity); });
        var top = {};
        Object.keys(doc).forEach(function (key) { if (key !== "estimates") top[key] = doc[key]; });
        top.top = records.slice(0, k);
        top.k = k;
        return { status: 200, doc: top };
      });
  }

  /** A tree version's buckets as a top-K document: /histogram's estimate and interval of each bucket, the
   *  consistent tree of every level (n: every level's reports), largest first as /topk gives them. The answer's
   *  noise floor is its finest level's, not the tree's, so none is drawn. */
  function fetchTreeTop(m) {
    return api(metricPath(m, "histogram") + "?" + query({ version: state.version, window: $("window").value }))
      .then(function (answer) {
        state.histogram = answer.status === 200 ? answer.doc : null;
        if (answer.status !== 200 || !answer.doc) return answer;
        var doc = answer.doc, h = doc.histogram, top = {};
        Object.keys(doc).forEach(function (key) {
          if (["histogram", "noise_floor", "processed_noise_floor"].indexOf(key) < 0) top[key] = doc[key];
        });
        top.top = (h ? h.buckets : []).map(function (b, i) {
          return { value: String(i), frequency: b.estimate, ci_low: b.ci_low, ci_high: b.ci_high,
                   count: num(b.estimate) * num(doc.n) };
        });
        top.top.sort(function (a, b) { return b.frequency - a.frequency; });
        top.tree_levels = h ? h.levels.length : null;
        return { status: 200, doc: top };
      });
  }

  /** A flat numeric version's /histogram (its quantiles and mean, drawNumericSummary); a tree's comes with its bars
   *  (fetchTreeTop), any other metric has none. */
  function fetchHistogram(m) {
    if (!numericLayout() || isTree() || isCombined()) { if (!isTree()) state.histogram = null; return Promise.resolve(null); }
    return api(metricPath(m, "histogram") + "?" + query({ version: state.version, window: $("window").value }))
      .then(function (answer) {
        if (answer.status !== 503) state.histogram = answer.status === 200 ? answer.doc : null;  // 503: keep the last
        return answer;
      });
  }

  /** One line under a numeric metric's bars: its quantiles and mean with their intervals, from /histogram (a Hybrid
   *  mean says so), and the simulated fleet's true mean beside them when the truth file holds it. */
  function drawNumericSummary(m) {
    var line = $("numeric-summary"), doc = state.histogram, h = doc && !doc.withheld ? doc.histogram : null;
    if (!numericLayout() || !h) { line.hidden = true; line.textContent = ""; return; }
    var unit = m && m.unit ? " " + m.unit : "";
    var interval = function (x) {
      return shortNumber(num(x.estimate)) + unit + " [" + shortNumber(num(x.ci_low)) + ", " + shortNumber(num(x.ci_high)) + "]";
    };
    var parts = (h.quantiles || []).map(function (q) { return "p" + shortNumber(100 * num(q.q)) + " " + interval(q); });
    if (h.mean && h.mean.estimate != null) {
      parts.push("mean " + interval(h.mean) + (h.mean.mechanism === "hybrid" ? " (Hybrid mechanism)" : ""));
    }
    var truth = truthDocFor(m);
    if (truth && truth.mean && truth.mean.value != null) {
      parts.push("true mean of the simulated fleet " + shortNumber(num(truth.mean.value)) + unit);
    }
    line.textContent = parts.length ? Math.round(num(h.confidence) * 100) + " % intervals: " + parts.join(" · ") : "";
    line.hidden = !parts.length;
  }

  /** /console/truth for the shown metric, at most every TRUTH_REFRESH_MS (ocms run rewrites it every few s). */
  function fetchTruth(m) {
    var key = m.name;
    if (key === state.truthKey && Date.now() - state.truthFetched < TRUTH_REFRESH_MS) return Promise.resolve(null);
    return api("/console/truth?" + query({ metric: m.name })).then(function (truth) {
      if (truth.status === 200 && truth.doc) { state.truth = truth.doc; state.truthKey = key; state.truthFetched = Date.now(); }
      else if (truth.status !== 503) { state.truth = null; state.truthKey = null; }  // 503: keep the last truth through a busy moment
      return truth;
    });
  }

  function refreshMetric() {
    var m = current(), v = currentVersion();
    if (!m || !v) {
      metricState("empty", "This worker serves no metric.");
      state.histogram = null; drawNumericSummary(m); drawTop(null);
      return Promise.resolve();
    }
    // a numeric metric's distribution: every bucket, in bucket order (drawTop); else the K most frequent values
    var k = numericLayout() ? num(v.tracked_values) || 10 : Math.min(Number($("k").value), num(v.tracked_values) || 10);
    $("topk-h").textContent = numericLayout() ? "Distribution over its buckets" : "Most frequent values";
    return Promise.all([fetchTop(m, k), fetchTruth(m), fetchHistogram(m)]).then(function (answers) {
      var top = answers[0];
      drawNumericSummary(m);
      if (top.status === 503 && state.top) {
        // Healthy worker, busy query thread (it turns heavy answers away with 503 + Retry-After):
        // keep the last answer on screen and say so, rather than blanking the charts.
        metricState("busy", "The worker is busy answering other queries (" + top.error + "); showing the last answer, retrying.");
        return;
      }
      if (top.status !== 200) {
        state.top = null;
        drawTop(null);
        if (top.status === 503) metricState("wait", "The worker is not answering estimates yet (" + top.error + "); retrying.");
        else metricState("error", "The API answered an error: " + top.error + ".");
        return;
      }
      state.top = top.doc;
      if (top.doc.withheld) {
        var text = withheldText(m, top.doc);
        metricState("withheld", text + discoveryHint(m, top.doc));
        drawTop(null, text);
        chooseTrendValues(top.doc);
        return refreshTrend(m);  // a trend withholds point by point: older buckets may be published
      }
      if (!num(top.doc.n)) {
        metricState("empty", "No reports counted for " + versionLabel(m) + " in this window yet; the charts fill in as reports arrive." +
          discoveryHint(m, top.doc));
      } else {
        metricState(null);
      }
      drawTop(top.doc);
      chooseTrendValues(top.doc);
      return refreshTrend(m);
    });
  }

  function discoveryHint(m, doc) {
    return discoverable(m) && !num(doc && doc.n) ? " Its devices may send discovery reports instead: see “Discovered values”." : "";
  }

  function windowName(kind) { return kind === "latest_bucket" ? "latest complete bucket" : kind === "total" ? "everything retained" : kind; }

  function withheldText(m, doc) {
    var kind = doc && doc.window && doc.window.kind;
    return "Withheld: " + (kind ? "the window “" + windowName(kind) + "”" : "this window") + " of " + versionLabel(m) +
      " holds " + int(doc.n) + " reports, fewer than its min_reports of " + int(doc.min_reports) +
      ". The API publishes no estimate for it (nothing is exported either) until enough reports arrive.";
  }

  // ------------------------------------------------------------ metrics list
  function epsilons(m) {
    var vs = versionsOf(m);
    if (vs.length === 1) return String(num(vs[0].epsilon));
    return vs.map(function (v) { return num(v.epsilon) + " (v" + v.version + ")"; }).join(" · ");
  }

  function mechanisms(m, short) {
    var names = [];
    versionsOf(m).forEach(function (v) { var t = mechanism(v, short); if (names.indexOf(t) < 0) names.push(t); });
    return names.join(short ? ", " : "; ");
  }

  function withheldWindows(m) {
    var list = m.withheld_windows;
    if (list == null) {  // a listing without the summary: from the versions' windows, if given
      list = [];
      versionsOf(m).forEach(function (v) {
        Object.keys(v.windows || {}).forEach(function (kind) {
          var w = v.windows[kind];
          if (w.withheld) list.push({ version: v.version, window: kind, reports: w.reports, min_reports: v.min_reports });
        });
      });
    }
    if (!list.length) return { lines: ["none"], count: 0 };
    var many = versionsOf(m).length > 1;
    return { count: list.length, lines: list.map(function (w) {
      return (many ? "v" + w.version + " " : "") + (w.window === "total" ? "all retained" : w.window === "latest_bucket" ? "latest bucket" : w.window) +
        ": " + int(w.reports) + " of " + int(w.min_reports) + " reports";
    }) };
  }

  function freshness(m) {
    var changed = state.lastChange[m.name];
    var parts = [changed ? "new reports " + ago(serverNow() - changed)
      : (num(m.reports) ? "no new report since the page opened" : "no reports yet")];
    if (num(m.latest_bucket_start) != null) parts.push("newest bucket " + timeText(num(m.latest_bucket_start)));
    if (state.health && num(state.health.view_lag_messages)) parts.push("view " + int(state.health.view_lag_messages) + " records behind");
    return parts.join("; ");
  }

  function renderMetrics() {
    var body = $("metrics").tBodies[0];
    var rows = metrics().map(function (m) {
      var rate = rateOf(m.name);
      var withheld = withheldWindows(m);
      var button = el("button", { type: "button", class: "pick", "data-metric": m.name, "aria-pressed": String(m.name === state.selected),
        title: versionsOf(m).map(function (v) { return "v" + v.version + " fingerprint " + v.fingerprint; }).join("\n"), text: m.name });
      var description = el("td", {}, [str(m.description) || "—"].concat(m.owner ? [el("span", { class: "owner", text: " · " + m.owner })] : []));
      return el("tr", { class: m.name === state.selected ? "selected" : "", "data-metric": m.name }, [
        el("th", { scope: "row" }, [button].concat(discoverable(m) ? [" ", el("span", { class: "tag", text: "discoverable" })] : [])),
        description,
        el("td", { text: str(m.unit) || "—" }),
        el("td", { class: "num", text: epsilons(m) }),
        el("td", { title: mechanisms(m), text: mechanisms(m, true) }),
        el("td", { class: "num", text: versionsOf(m).map(function (v) { return v.version; }).join(", ") }),
        el("td", { class: "num", "data-raw": str(m.reports), text: int(m.reports) }),
        el("td", { class: "num rate", "data-raw": str(rate), text: rate == null ? "measuring…" : rate.toFixed(rate < 10 ? 1 : 0) }),
        el("td", { text: freshness(m) }),
        el("td", { class: withheld.count ? "withheld" : "", "data-withheld": String(withheld.count) },
          withheld.lines.map(function (line) { return el("span", { class: "line", text: line }); })),
      ]);
    });
    if (!rows.length) rows = [el("tr", {}, [el("td", { colspan: "10", class: "muted", text: "this worker serves no metric" })])];
    // Same metrics as on screen: update the rows in place, so focus and element identity survive a poll.
    var existing = Array.prototype.slice.call(body.rows);
    var same = existing.length === rows.length && rows.every(function (tr, i) {
      return tr.getAttribute("data-metric") != null && existing[i].getAttribute("data-metric") === tr.getAttribute("data-metric");
    });
    if (same) {
      rows.forEach(function (tr, i) {
        var old = existing[i];
        old.className = tr.className;
        var button = old.cells[0].querySelector("button"), fresh = tr.cells[0].querySelector("button");
        button.setAttribute("aria-pressed", fresh.getAttribute("aria-pressed"));
        if (button.textContent !== fresh.textContent) button.textContent = fresh.textContent;
        for (var c = 1; c < tr.cells.length; c++) {
          if (old.cells[c].textContent !== tr.cells[c].textContent) old.cells[c].replaceChildren.apply(old.cells[c], Array.prototype.slice.call(tr.cells[c].childNodes));
          ["data-raw", "data-withheld", "class", "title"].forEach(function (a) {
            if (tr.cells[c].hasAttribute(a)) old.cells[c].setAttribute(a, tr.cells[c].getAttribute(a));
          });
        }
      });
      return;
    }
    var focused = document.activeElement && document.activeElement.getAttribute("data-metric");
    body.replaceChildren.apply(body, rows);
    if (focused) { var again = body.querySelector('button[data-metric="' + cssEscape(focused) + '"]'); if (again) again.focus(); }
  }

  /** The metric chooser at the top: every metric by name (the table below has the details). */
  function renderMetricSelect() {
    var select = $("metric-select");
    var names = metrics().map(function (m) { return m.name + (discoverable(m) ? "\u0001" : ""); });
    var key = names.join("\n");
    if (select.getAttribute("data-options") !== key) {
      select.replaceChildren.apply(select, metrics().map(function (m) {
        return el("option", { value: m.name, text: m.name + (discoverable(m) ? " (discoverable)" : "") });
      }));
      select.setAttribute("data-options", key);
    }
    if (state.selected != null) select.value = state.selected;
    select.disabled = metrics().length < 2;
    var m = current();
    $("metric-desc").textContent = m ? [str(m.description), m.owner ? "owner " + m.owner : "", m.unit ? "unit: " + m.unit : ""]
      .filter(Boolean).join(" · ") : "";
  }

  function selectMetric(name) {
    if (name === state.selected) return;
    linkNote(null);
    chooseMetric(name);
    renderMetrics(); renderMetricSelect(); renderVersions(); renderParams(); renderSteps();
    writeView();
    poll();
  }

  /** The version selector: each live version, and "combined" when there are several. */
  function renderVersions() {
    var select = $("version"), m = current(), vs = versionsOf(m);
    var options = vs.map(function (v, i) {
      return { value: String(v.version), text: "version " + v.version + " (ε = " + num(v.epsilon) + (i === vs.length - 1 ? ", newest" : "") + ")" };
    });
    if (vs.length > 1) options.push({ value: COMBINED, text: "combined (versions " + vs.map(function (v) { return v.version; }).join(" + ") + ", inverse-variance)" });
    var key = (m ? m.name : "") + "|" + options.map(function (o) { return o.value + o.text; }).join(",");
    if (select.getAttribute("data-options") !== key) {
      select.replaceChildren.apply(select, options.map(function (o) { return el("option", { value: o.value, text: o.text }); }));
      select.setAttribute("data-options", key);
    }
    if (state.version != null) select.value = state.version;
    select.disabled = options.length < 2;
    // Combined estimates are the unbiased ones (the API combines no post-processed estimate).
    var pp = $("postprocess");
    // A tree's histogram has one post-processing, its consistency (in the CDF and quantiles): the bars are its raw
    // estimates, which its intervals are about.
    pp.disabled = isCombined() || isTree();
    if (pp.disabled) pp.value = "none";
    $("combined-note").hidden = !isCombined();
  }

  // ----------------------------------------------------------- parameters
  /** δ as a power of ten when it is one (10^-6), else in exponent notation. */
  function deltaText(delta) {
    var exponent = Math.log10(delta);
    return Math.abs(exponent - Math.round(exponent)) < 1e-9 ? "10^" + Math.round(exponent) : delta.toExponential(1);
  }

  /** The sentence on shuffling of the version's total window (agents.answers.privacy.central_privacy): the central (ε, δ)
   *  when every report came through a shuffling collector, what was not shuffled when some did; "" otherwise. */
  function shuffledWords(v, eps) {
    var w = (v.windows || {}).total || {};
    var central = num(w.central_epsilon), shuffled = num(w.shuffled_reports) || 0;
    if (central != null) {
      return "Shuffled in batches of at least " + int(w.shuffle_batch_min) + " reports: to whoever reads Kafka or the " +
        "worker (not the collector), each report is (" + Number(central.toPrecision(2)) + ", " + deltaText(num(w.central_delta)) +
        ")-DP, not only ε = " + eps + ". A device with reports in k batches: k times that.";
    }
    if (shuffled > 0) {
      return "Partly shuffled: " + int(shuffled) + " of the " + int(w.reports) + " reports came through a shuffling " +
        "collector; the others are only ε = " + eps + " per report, so no smaller central ε is claimed.";
    }
    return "";
  }

  function renderParams() {
    var m = current(), v = currentVersion();
    $("metric-h").textContent = m ? "Metric: " + versionLabel(m) : "Metric";
    var words = $("params-words");
    if (!m || !v) { words.replaceChildren(); $("params-table").replaceChildren(); return; }
    var p = v.parameters || v;
    var eps = num(v.epsilon), mm = num(v.hash_range), keep = num(p.keep_probability);
    var ratio = eps != null ? Math.exp(eps) : null;
    var keepText = keep != null ? (keep * 100).toFixed(1) + " %" : "e^ε / (e^ε + m − 1)";
    var bytes = num(p.report_bytes) != null ? int(p.report_bytes) + " bytes" : "a few bytes";
    var report = str(v.mechanism) === "direct"
      ? "Each device sends reports of " + bytes + ": one value z out of the " + int(mm) +
        " possible ones. z is the true value with probability " + keepText + " and otherwise one of the other " +
        int(mm != null ? mm - 1 : null) + " values at random. So a report never reveals the value for sure."
      : "Each device sends reports of " + bytes + ": two hash coefficients (a0, a1) drawn at random, " +
        "independently of the value, and one symbol z out of " + int(mm) + ". z is the value's hash, kept with probability " +
        keepText + " and otherwise replaced by one of the other " + int(mm != null ? mm - 1 : null) +
        " symbols at random. So a report reveals neither the value nor its hash for sure.";
    var domain = v.domain === "categories" ? int(v.domain_size) + " named categories"
      : v.domain === "strings" ? "an open domain of strings" : "a dictionary of " + int(v.domain_size) + " integers";
    var paragraphs = [
      "Mechanism: " + mechanism(v) + ".",
      (versionsOf(m).length > 1 ? "Version " + v.version + (isCombined() ? " (the newest; the combined estimates weigh every live version by its variance)" : "") + ". " : "") + report,
      "Privacy: ε = " + (eps != null ? eps : "?") + " per report (local differential privacy). For any two values, the chance of " +
        "sending any given report differs by at most a factor e^ε = " + (ratio != null ? ratio.toFixed(2) : "?") +
        (v.longitudinal ? longitudinalWords(v.longitudinal)
          : ". k reports from one device add up to k·ε, whatever values they are about."),
      shuffledWords(v, eps),
      "What the server sees besides the report: its timing and the device key used for partitioning. " +
        "Estimates are computed from reports only, so they cannot weaken the guarantee.",
      "Estimates: " + int(v.tracked_values) + " tracked values out of " + domain +
        (m.unit ? " (unit: " + m.unit + ")" : "") + "; each estimate is the value's share of the reports counted, with a " +
        (state.top && num(state.top.confidence) ? Math.round(state.top.confidence * 100) : 95) + " % confidence interval." +
        (num(v.min_reports) ? " A window with fewer than " + int(v.min_reports) + " reports is withheld: no estimate is published for it." : ""),
    ];
    paragraphs = paragraphs.filter(function (t) { return t; });
    if (v.discoverable) paragraphs.push("Discovery: values nobody listed are found from discovery reports (a prefix of the value at a " +
      "level drawn at random, ε per report as above); see “Discovered values”.");
    if (m.description) paragraphs.unshift(str(m.description) + (m.owner ? " (owner: " + m.owner + ")" : ""));
    words.replaceChildren.apply(words, paragraphs.map(function (t) { return el("p", { text: t }); }));
    var flat = {};
    [v, p].forEach(function (doc) {
      Object.keys(doc).forEach(function (k) { if (typeof doc[k] !== "object" || doc[k] === null) flat[k] = doc[k]; });
    });
    var table = el("table", { class: "data" }, [
      el("caption", { class: "sr-only", text: "All parameters of " + versionLabel(m) }),
      el("tbody", {}, Object.keys(flat).map(function (k) {
        return el("tr", {}, [el("th", { scope: "row", text: k }), el("td", { text: str(flat[k]) })]);
      })),
    ]);
    $("params-table").replaceChildren(table);
  }

  // ------------------------------------------------------------- trend range
  function levelsOf(v) {
    return (v && v.levels) || (v ? [{ bucket_seconds: v.bucket_seconds, retention_seconds: v.retention_seconds }] : []);
  }

  /** The trend's range in seconds: the chosen one, or for "fit the data" the time since the
   *  version's oldest bucket holding reports (whole buckets), at most AUTO_RANGE_MAX_S (or 3 buckets). */
  function currentRange() {
    var chosen = $("range").value;
    if (chosen !== "auto") return Number(chosen);
    var v = currentVersion(), levels = levelsOf(v);
    var width = levels.length ? num(levels[0].bucket_seconds) || 60 : 60;
    var most = Math.max(AUTO_RANGE_MAX_S, 3 * width);
    var oldest = v && num(v.oldest_bucket_start);
    if (oldest == null) return most;
    // The API widens `from` to its bucket's start: now - (now - oldest) starts at the oldest bucket.
    var since = Math.ceil(serverNow() - oldest);
    return Math.min(most, Math.max(width, since));
  }

  function renderSteps() {
    var select = $("step"), v = currentVersion();
    var levels = levelsOf(v);
    var base = levels.length ? num(levels[0].bucket_seconds) : 60;
    // Ranges longer than the longest retention have no buckets to show (and the API refuses them).
    var longest = Math.max.apply(null, levels.map(function (l) { return num(l.retention_seconds) || 0; }).concat([0]));
    var rangeSelect = $("range");
    if (longest > 0) {
      Array.prototype.forEach.call(rangeSelect.options, function (o) { o.disabled = o.value !== "auto" && Number(o.value) > longest; });
      if (rangeSelect.selectedOptions[0] && rangeSelect.selectedOptions[0].disabled) rangeSelect.value = "auto";
    }
    var range = currentRange();
    var options = [];
    levels.forEach(function (level) {
      var w = num(level.bucket_seconds);
      if (range <= num(level.retention_seconds) || options.length === 0) {
        [1, 5, 15, 60, 360].forEach(function (mult) {
          var step = w * mult;
          if (step <= range / 2 && options.indexOf(step) < 0 && range / step <= 10000) options.push(step);
        });
      }
    });
    if (!options.length) options.push(base);
    options.sort(function (a, b) { return a - b; });
    var auto = options.filter(function (s) { return range / s <= TREND_POINTS_TARGET; })[0] || options[options.length - 1];
    var key = options.join(",");
    if (select.getAttribute("data-options") !== key) {
      var previous = select.getAttribute("data-chosen") === "true" ? Number(select.value) : NaN;
      if (state.wantedStep != null) { previous = Number(state.wantedStep); state.wantedStep = null; }
      select.replaceChildren.apply(select, options.map(function (s) { return el("option", { value: String(s), text: duration(s) }); }));
      var keep = options.indexOf(previous) >= 0;
      select.value = String(keep ? previous : auto);
      if (keep) select.setAttribute("data-chosen", "true"); else select.removeAttribute("data-chosen");
      select.setAttribute("data-options", key);
    }
  }

  // --------------------------------------------------------------- top-K
  /** The answer's noise floor on the bars' scale: processed bars are read against processed_noise_floor
   *  (the floor moved by the same post-processing), raw bars against noise_floor; null when not given. */
  function noiseFloor(doc) {
    if (!doc) return null;
    var processed = doc.postprocess && doc.postprocess !== "none";
    return processed && num(doc.processed_noise_floor) != null ? num(doc.processed_noise_floor) : num(doc.noise_floor);
  }

  function topRows(doc) {
    var p = current(), t = truthFor(p), processed = doc.postprocess && doc.postprocess !== "none";
    var floor = noiseFloor(doc);
    var ordered = (doc.top || []).slice();
    if (numericLayout()) ordered.sort(function (a, b) { return Number(a.value) - Number(b.value); });  // the histogram
    return ordered.map(function (r) {
      var v = str(r.value);
      var estimate = num(processed ? r.processed : r.frequency);
      // Whiskers belong to the bar: a processed answer's own interval when it gives one.
      var low = processed && num(r.processed_ci_low) != null ? num(r.processed_ci_low) : num(r.ci_low);
      var high = processed && num(r.processed_ci_high) != null ? num(r.processed_ci_high) : num(r.ci_high);
      var above = typeof r.above_noise === "boolean" ? r.above_noise : null;
      return {
        value: v, label: valueLabel(v), short: valueName(v),
        estimate: estimate, raw: num(r.frequency), processed: num(r.processed),
        low: low, high: high, count: num(processed ? r.processed_count : r.count),
        above: above, belowNoise: above === false || (above == null && floor != null && estimate != null && estimate <= floor),
        truth: t ? (t.freq[v] != null ? t.freq[v] : 0) : null,
        bytes: r.bytes_hex, cut: r.cut_inside_character,
      };
    });
  }

  function drawTop(doc, withheld) {
    var container = $("topk-chart");
    var rows = doc ? topRows(doc) : [];
    var p = current();
    var hasTruth = !!truthFor(p);
    var floor = noiseFloor(doc);
    var below = rows.filter(function (r) { return r.belowNoise; }).length;
    $("topk-summary").textContent = doc
      ? "n = " + int(doc.n) + " reports counted · " + Math.round(num(doc.confidence) * 100) + " % " + str(doc.interval) +
        " confidence intervals (whiskers) · " + (doc.postprocess === "none" || !doc.postprocess ? "raw unbiased estimates" : "post-processed (" + doc.postprocess + ")") +
        (doc.tree_levels ? " of the consistent tree of its " + int(doc.tree_levels) + " levels (n: every level's reports)" : "") +
        (hasTruth ? " · ◆ true frequency of the simulated fleet" : "")
      : "";
    var note = $("noise-note");
    if (doc && rows.length && floor != null) {
      var v = currentVersion();
      var tracked = num(doc.tracked_values) != null ? num(doc.tracked_values) : v && num(v.tracked_values);
      note.hidden = false;
      note.textContent = "Values below the dashed line (noise floor " + pct(floor) + ") cannot be told apart from zero among the " +
        int(tracked) + " tracked values at " + int(doc.n) + " reports (their lower bound, simultaneous over all " + int(tracked) +
        " at " + Math.round(num(doc.confidence) * 100) + " %, is not above 0): " +
        (below ? below + " of the " + rows.length + " shown, drawn grey." : "none of the " + rows.length + " shown.");
    } else {
      note.hidden = true; note.textContent = "";
    }
    var legend = doc && rows.length ? [{ color: COLORS[0], text: "estimated frequency (%)", shape: "bar" },
      { color: "#222", text: "confidence interval", shape: "whisker" }] : [];
    if (doc && rows.length && floor != null) legend.push({ color: "#6e7781", text: "noise floor; grey: within noise", shape: "dashed" });
    if (doc && rows.length && hasTruth) legend.push({ color: TRUTH_COLOR, text: "true frequency (%)", shape: "diamond" });
    renderLegend("topk-legend", legend);
    container.setAttribute("aria-label", rows.length
      ? (numericLayout() ? "Bar chart of the distribution over " + rows.length + " buckets, lowest first; the first is " :
         "Bar chart of the " + rows.length + " most frequent values; the largest is ") + rows[0].label + " at " + pct(rows[0].estimate) +
        (floor != null ? "; " + below + " below the noise floor of " + pct(floor) : "") + ". Use “Show as table” for all numbers."
      : "No estimates to chart");
    container.setAttribute("data-values", rows.map(function (r) { return r.value; }).join("\n"));
    renderTopTable(rows, doc, hasTruth);
    state.topRows = rows;
    state.topFloor = floor;
    if (!rows.length) {
      container.replaceChildren(el("p", { class: withheld ? "empty withheld" : "empty",
        text: withheld ? "Withheld: too few reports in this window to publish estimates." : doc ? "No values to show yet." : "No data." }));
      return;
    }
    drawBars(container, rows, floor);
  }

  /** A nice step (1, 2 or 5 x 10^k) for about ``count`` ticks over [lo, hi]. */
  function niceTicks(lo, hi, count) {
    var span = hi - lo, raw = span / Math.max(1, count), mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var step = [1, 2, 5, 10].map(function (m) { return m * mag; }).filter(function (s) { return s >= raw; })[0] || 10 * mag;
    var ticks = [];
    for (var t = Math.floor(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(Math.abs(t) < step * 1e-9 ? 0 : t);
    if (ticks[ticks.length - 1] < hi) ticks.push(ticks[ticks.length - 1] + step);
    return { ticks: ticks, step: step };
  }

  /** A value whose bytes are not whole characters (a discovered prefix cut inside one) arrives as text
   *  with U+FFFD at the cut plus its exact bytes (bytes_hex, docs/discovery.md): shown on hover. */
  function withBytes(attrs, bytesHex, cut) {
    if (bytesHex) {
      attrs.title = "exact bytes (hex): " + bytesHex + (cut ? " (cut inside a character)" : "");
      attrs["data-bytes"] = bytesHex;
    }
    return attrs;
  }

  var measureCanvas = null;
  function textWidth(text, font) {
    measureCanvas = measureCanvas || document.createElement("canvas");
    var ctx = measureCanvas.getContext("2d");
    ctx.font = font;
    return ctx.measureText(text).width;
  }

  /** ``text`` cut with an ellipsis to fit ``width`` pixels in ``font``. */
  function fitText(text, width, font) {
    if (textWidth(text, font) <= width) return text;
    var chars = Array.from(text), lo = 0, hi = chars.length;
    while (lo < hi) {  // the longest prefix that fits with the ellipsis
      var mid = Math.ceil((lo + hi) / 2);
      if (textWidth(chars.slice(0, mid).join("") + "…", font) <= width) lo = mid; else hi = mid - 1;
    }
    return chars.slice(0, lo).join("") + "…";
  }

  /** Horizontal bars, one row per value (names never overlap, whatever K): the value's name left,
   *  its bar, whisker (CI) and ◆ truth right; the noise floor a dashed line, bars under it grey. */
  function drawBars(container, rows, floor) {
    var width = chartWidth(container);
    var family = getComputedStyle(container).fontFamily || "sans-serif";
    var font = "12px " + family;
    var rowH = rows.length > 20 ? 18 : 22, barH = rowH - 8, top = 18, axisH = 36;
    var longest = Math.max.apply(null, rows.map(function (r) { return textWidth(r.short, font); }));
    var labelW = Math.max(40, Math.min(Math.ceil(longest) + 4, Math.round(width * 0.3), 220));
    var plotL = labelW + 10, plotR = width - 14;
    var lo = 0, hi = 0;
    rows.forEach(function (r) {
      [r.low, r.estimate].forEach(function (x) { if (x != null) lo = Math.min(lo, x); });
      [r.high, r.estimate, r.truth].forEach(function (x) { if (x != null) hi = Math.max(hi, x); });
    });
    if (floor != null) hi = Math.max(hi, floor);
    if (!(hi > lo)) hi = lo + 0.01;
    var nice = niceTicks(lo, hi, Math.max(2, Math.floor((plotR - plotL) / 90)));
    lo = Math.min(lo, nice.ticks[0]); hi = Math.max(hi, nice.ticks[nice.ticks.length - 1]);
    function x(v) { return plotL + (v - lo) / (hi - lo) * (plotR - plotL); }
    var height = top + rows.length * rowH + axisH;
    var plotBottom = top + rows.length * rowH;
    var decimals = nice.step * 100 >= 1 ? 0 : nice.step * 100 >= 0.1 ? 1 : 2;
    var parts = [];
    nice.ticks.forEach(function (t) {
      parts.push(svg("line", { class: "grid", x1: x(t), x2: x(t), y1: top, y2: plotBottom }));
      parts.push(svg("text", { class: "x-tick", x: x(t), y: plotBottom + 14, "text-anchor": "middle", text: (t * 100).toFixed(decimals) }));
    });
    parts.push(svg("line", { class: "zero", x1: x(0), x2: x(0), y1: top - 4, y2: plotBottom }));
    parts.push(svg("text", { class: "axis-label", x: (plotL + plotR) / 2, y: plotBottom + 30, "text-anchor": "middle", text: "frequency (%)" }));
    rows.forEach(function (r, i) {
      var cy = top + i * rowH + rowH / 2;
      var cls = "bar-row" + (r.belowNoise ? " below-noise" : "");
      var tip = r.label + ": " + pct(r.estimate) + (r.low != null ? " [" + pct(r.low) + ", " + pct(r.high) + "]" : "") +
        (r.belowNoise ? " (within noise)" : "") + (r.truth != null ? "; true " + pct(r.truth) : "") +
        (r.bytes ? "; exact bytes (hex): " + r.bytes : "");
      var g = svg("g", { class: cls, "data-value": r.value }, [svg("title", { text: tip })]);
      g.appendChild(svg("text", { class: "value-label", x: labelW, y: cy + 4, "text-anchor": "end", text: fitText(r.short, labelW, font) }));
      if (r.estimate != null) {
        var x0 = x(Math.min(0, r.estimate)), x1 = x(Math.max(0, r.estimate));
        g.appendChild(svg("rect", { class: "bar", x: x0, y: cy - barH / 2, width: Math.max(1, x1 - x0), height: barH }));
      }
      if (r.low != null && r.high != null) {
        var cap = barH / 2 - 1;
        g.appendChild(svg("path", { class: "whisker", d: "M" + x(r.low) + " " + cy + "H" + x(r.high) +
          "M" + x(r.low) + " " + (cy - cap) + "V" + (cy + cap) + "M" + x(r.high) + " " + (cy - cap) + "V" + (cy + cap) }));
      }
      if (r.truth != null) {
        var tx = x(r.truth), s = 5;
        g.appendChild(svg("path", { class: "truth-marker", d: "M" + tx + " " + (cy - s) + "L" + (tx + s) + " " + cy + "L" + tx + " " + (cy + s) +
          "L" + (tx - s) + " " + cy + "Z" }));
      }
      parts.push(g);
    });
    if (floor != null) {
      parts.push(svg("line", { class: "noise-floor", x1: x(floor), x2: x(floor), y1: top - 6, y2: plotBottom, "data-floor": String(floor) }));
      parts.push(svg("text", { class: "noise-floor-label", x: Math.min(x(floor) + 4, plotR - 60), y: top - 7, text: "noise floor " + pct(floor) }));
    }
    var root = svg("svg", { class: "bars", width: width, height: height, viewBox: "0 0 " + width + " " + height, "aria-hidden": "true" }, parts);
    container.replaceChildren(root);
  }

  function renderTopTable(rows, doc, hasTruth) {
    var noise = rows.some(function (r) { return r.above != null; }) || noiseFloor(doc) != null;
    var head = ["Rank", "Value", "Estimate", "CI low", "CI high", "Estimated count"].concat(noise ? ["Above noise"] : [])
      .concat(hasTruth ? ["True frequency"] : []);
    var table = el("table", { class: "data", id: "topk-data" }, [
      el("caption", { text: doc ? "Top " + rows.length + " values, frequencies in percent of " + int(doc.n) + " reports" : "No data" }),
      el("thead", {}, [el("tr", {}, head.map(function (h) { return el("th", { scope: "col", text: h }); }))]),
      el("tbody", {}, rows.map(function (r, i) {
        return el("tr", { "data-value": r.value, class: r.belowNoise ? "below-noise" : null }, [
          el("td", { class: "num", text: String(i + 1) }),
          el("th", withBytes({ scope: "row", class: "value", text: r.label }, r.bytes, r.cut)),
          el("td", { class: "num est", "data-raw": String(r.estimate), text: pct(r.estimate) }),
          el("td", { class: "num ci-low", "data-raw": String(r.low), text: pct(r.low) }),
          el("td", { class: "num ci-high", "data-raw": String(r.high), text: pct(r.high) }),
          el("td", { class: "num", text: int(r.count) }),
        ].concat(noise ? [el("td", { class: "noise", "data-raw": String(!r.belowNoise), text: r.belowNoise ? "no: within noise" : "yes" })] : [])
         .concat(hasTruth ? [el("td", { class: "num truth", "data-raw": String(r.truth), text: pct(r.truth) })] : []));
      })),
    ]);
    $("topk-table").replaceChildren(table);
  }

  // --------------------------------------------------------------- trend
  function chooseTrendValues(doc) {
    var top = (doc.top || []).map(function (r) { return str(r.value); });
    // A withheld window has no top values: offer the version's watch list (named values) instead.
    if (!top.length && currentVersion()) top = (currentVersion().watch || []).map(str);
    if (!state.trendChosenByUser) state.trendValues = top.slice(0, 3);
    var shown = top.slice();
    state.trendValues.forEach(function (v) { if (shown.indexOf(v) < 0) shown.push(v); });
    var box = $("trend-values");
    var key = shown.join("\n") + "|" + state.trendValues.join("\n");
    if (box.getAttribute("data-key") === key) return;
    box.setAttribute("data-key", key);
    var focused = document.activeElement && document.activeElement.getAttribute("data-trend-value");
    var items = shown.map(function (v, i) {
      var id = "trend-v-" + i;
      var input = el("input", { type: "checkbox", id: id, value: v, "data-trend-value": v });
      input.checked = state.trendValues.indexOf(v) >= 0;
      input.disabled = !input.checked && state.trendValues.length >= MAX_TREND_VALUES;
      return el("label", { for: id, class: "check" }, [input, " " + valueLabel(v)]);
    });
    box.replaceChildren.apply(box, [el("legend", { text: "Values (up to " + MAX_TREND_VALUES + ")" })].concat(items));
    if (focused) { var again = box.querySelector('input[data-trend-value="' + cssEscape(focused) + '"]'); if (again) again.focus(); }
  }

  function cssEscape(s) { return window.CSS && CSS.escape ? CSS.escape(s) : s.replace(/"/g, '\\"'); }

  function refreshTrend(p) {
    var values = state.trendValues.slice();
    if (!values.length) { drawTrend(p, [], [], currentRange()); state.trendKey = null; return Promise.resolve(); }
    renderSteps();  // "fit the data" grows with the data: its step choices may change
    var range = currentRange(), step = $("step").value;
    // A trend point covers a whole bucket step: refetch when the choice changed, else at most
    // every TREND_REFRESH_MS (the worker's query thread is shared with every other client).
    var version = isCombined() ? String(newest(p).version) : state.version;  // a trend reads one version
    var key = [p.name, version, values.join("\n"), range, step, $("postprocess").value].join("|");
    if (key === state.trendKey && Date.now() - state.trendFetched < TREND_REFRESH_MS) return Promise.resolve();
    state.trendKey = key; state.trendFetched = Date.now();
    var calls = values.map(function (v) {
      return api(metricPath(p, "trend") + "?" + query({ version: version, value: v, from: "now-" + range + "s", step: step,
        postprocess: $("postprocess").value }));
    });
    return Promise.all(calls).then(function (answers) {
      var errors = answers.filter(function (a) { return a.status !== 200; });
      if (errors.length) state.trendKey = null;  // try again on the next poll
      if (errors.length && errors.every(function (a) { return a.status === 503; }) && state.charts.trend) {
        return;  // busy: keep the last trend on screen
      }
      if (errors.length) {
        var e = errors[0];
        if (!$("metric-state").getAttribute("data-state")) {
          metricState(e.status === 503 ? "wait" : "error",
            e.status === 503 ? "The worker is starting; the trend appears when it is ready."
              : "The API answered an error for the trend: " + e.error + ".");
        }
      }
      drawTrend(p, values, answers.map(function (a) { return a.status === 200 ? a.doc : null; }), range);
    });
  }

  /** A point's value on the chart, or null: no reports in its bucket ("no data") or withheld. */
  function trendPointValue(pt, processed) {
    if (!num(pt.n) || pt.withheld) return null;
    return num(processed ? pt.processed : pt.frequency);
  }

  function rangeName(range) {
    return $("range").value === "auto" ? "last " + duration(range) + " (fits the data)" : $("range").selectedOptions[0].text;
  }

  function drawTrend(p, values, docs, range) {
    var container = $("trend-chart");
    var processed = $("postprocess").value !== "none";
    var usable = [];
    values.forEach(function (v, i) { if (docs[i] && docs[i].points) usable.push({ value: v, doc: docs[i] }); });
    renderLegend("trend-legend", usable.map(function (u, i) {
      return { color: COLORS[i % COLORS.length], text: valueLabel(u.value) + " (%, band: " + Math.round(num(u.doc.confidence) * 100) + " % CI)", shape: "line" };
    }));
    renderTrendTable(usable, processed);
    container.setAttribute("data-range", String(range));
    var points = [];
    usable.forEach(function (u) { points = points.concat(u.doc.points); });
    var anyData = points.some(function (pt) { return num(pt.n); });
    var published = points.some(function (pt) { return num(pt.n) && !pt.withheld; });
    if (usable.length && !anyData) {
      destroyChart("trend");
      container.replaceChildren(el("p", { class: "empty", text: "No data: no reports in the " + rangeName(range) + " yet." }));
      container.setAttribute("aria-label", "No trend data in this range");
      return;
    }
    if (usable.length && !published) {
      destroyChart("trend");
      container.replaceChildren(el("p", { class: "empty withheld",
        text: "Withheld: every bucket of this range that holds reports holds fewer than min_reports (the table lists them)." }));
      container.setAttribute("aria-label", "Every trend point is withheld");
      return;
    }
    if (!usable.length) {
      destroyChart("trend");
      container.replaceChildren(el("p", { class: "empty", text: values.length ? "No trend data." : "Choose values to see their trend." }));
      container.setAttribute("aria-label", "No trend to chart");
      return;
    }
    var xs = usable[0].doc.points.map(function (pt) { return num(pt.from); });
    var data = [xs];
    var series = [{}];
    var bands = [];
    usable.forEach(function (u, i) {
      var color = COLORS[i % COLORS.length];
      var byFrom = {};
      u.doc.points.forEach(function (pt) { byFrom[num(pt.from)] = pt; });
      var est = [], lo = [], hi = [];
      xs.forEach(function (x) {
        var pt = byFrom[x];
        var v = pt ? trendPointValue(pt, processed) : null;
        est.push(v == null ? null : v * 100);
        lo.push(v == null ? null : num(processed && pt.processed_ci_low != null ? pt.processed_ci_low : pt.ci_low) * 100);
        hi.push(v == null ? null : num(processed && pt.processed_ci_high != null ? pt.processed_ci_high : pt.ci_high) * 100);
      });
      var base = data.length;
      data.push(est, lo, hi);
      series.push({ label: valueLabel(u.value), stroke: color, width: 2, spanGaps: false, points: { show: xs.length < 60, size: 4 } });
      series.push({ label: "CI low", stroke: "transparent", width: 0, points: { show: false } });
      series.push({ label: "CI high", stroke: "transparent", width: 0, points: { show: false } });
      bands.push({ series: [base + 2, base + 1], fill: color + "33" });
    });
    container.setAttribute("aria-label", "Line chart of " + usable.map(function (u) { return valueLabel(u.value); }).join(", ") +
      " over the " + rangeName(range) + ", one point per " + duration(Number(usable[0].doc.step)) +
      ", with confidence bands. Use “Show as table” for all numbers.");
    var span = [xs[0], xs[xs.length - 1] + Number(usable[0].doc.step || 0)];
    state.trendSpan = span;
    var structure = usable.map(function (u) { return u.value; }).join("|") + "|" + xs.length;
    var chart = state.charts.trend;
    if (chart && chart._structure === structure) { chart.setData(data); return; }
    destroyChart("trend");
    container.replaceChildren();
    chart = new uPlot({
      width: chartWidth(container), height: 300,
      // room on the right for half of the last time label: uPlot centres each label on its tick, so the last one
      // was cut at the chart's edge
      padding: [null, 44, null, null],
      legend: { show: false },
      scales: { x: { time: true, range: function () { return state.trendSpan; } }, y: { auto: true } },
      axes: [{ label: "time (bucket start, " + TIME_ZONE + ")", values: timeTicks, space: 80 },
        { label: "frequency (%)", size: 60,
          values: function (u, splits) { return splits.map(function (v) { return v.toFixed(Math.abs(v) < 1 ? 2 : 1); }); } }],
      series: series, bands: bands,
    }, data, container);
    chart._structure = structure;
    state.charts.trend = chart;
  }

  /** The trend's time ticks in the page's one time format (the browser's locale); the labels drawn
   *  are kept in data-x-ticks for tests and tools. */
  function timeTicks(u, splits, axis, space, increment) {
    var first = splits.length ? new Date(splits[0] * 1000) : null, last = splits.length ? new Date(splits[splits.length - 1] * 1000) : null;
    var oneDay = first && first.toDateString() === last.toDateString();
    var format = increment < 60 ? TIME : oneDay ? AXIS_TIME : AXIS_DATE_TIME;
    var labels = splits.map(function (s) { return format.format(new Date(s * 1000)); });
    $("trend-chart").setAttribute("data-x-ticks", JSON.stringify(labels));
    return labels;
  }

  function renderTrendTable(usable, processed) {
    var rows = [];
    usable.forEach(function (u) {
      u.doc.points.forEach(function (pt) {
        var v = trendPointValue(pt, processed);
        var empty = !num(pt.n);
        var said = empty ? "no data" : pt.withheld ? "withheld" : pct(v);
        rows.push(el("tr", { "data-value": u.value }, [
          el("th", { scope: "row", class: "value", text: valueLabel(u.value) }),
          el("td", { class: "time", "data-raw": String(num(pt.from)), text: timeText(num(pt.from)) }),
          el("td", { text: duration(num(pt.to) - num(pt.from)) }),
          el("td", { class: "num reports", "data-raw": String(num(pt.n)), text: int(pt.n) }),
          el("td", { class: "num est", "data-raw": String(v), "data-withheld": String(!empty && !!pt.withheld),
            "data-empty": String(empty), text: said }),
          el("td", { class: "num ci-low", "data-raw": String(v == null ? null : num(pt.ci_low)), text: v == null ? "–" : pct(pt.ci_low) }),
          el("td", { class: "num ci-high", "data-raw": String(v == null ? null : num(pt.ci_high)), text: v == null ? "–" : pct(pt.ci_high) }),
        ]));
      });
    });
    var table = el("table", { class: "data", id: "trend-data" }, [
      el("caption", { text: "Trend points: frequency in percent of the reports counted in each bucket (no data: no report in it)" }),
      el("thead", {}, [el("tr", {}, ["Value", "Bucket start", "Bucket width", "Reports", "Estimate", "CI low", "CI high"]
        .map(function (h) { return el("th", { scope: "col", text: h }); }))]),
      el("tbody", {}, rows),
    ]);
    $("trend-table").replaceChildren(table);
  }

  // --------------------------------------------------------- discovered values
  function discoveredState(kind, text) {
    var s = $("discovered-state");
    if (!text) { s.hidden = true; s.textContent = ""; s.removeAttribute("data-state"); return; }
    s.hidden = false; s.className = "state state-" + kind; s.setAttribute("data-state", kind); s.textContent = text;
  }

  /** /discovered?metric=NAME for a discoverable metric (the worker's latest pass), at most every
   *  DISCOVERED_REFRESH_MS; the panel is hidden for other metrics. */
  function refreshDiscovered() {
    var m = current(), card = $("discovered-card");
    if (!m || !discoverable(m)) { card.hidden = true; state.discovered = null; return Promise.resolve(); }
    card.hidden = false;
    // A metric whose devices send only discovery reports: its discoveries first.
    card.style.order = num(m.reports) ? "" : "-1";
    if (state.discoveredKey === m.name && Date.now() - state.discoveredFetched < DISCOVERED_REFRESH_MS) return Promise.resolve();
    state.discoveredKey = m.name; state.discoveredFetched = Date.now();
    return Promise.all([api("/discovered?" + query({ metric: m.name })), fetchTruth(m)]).then(function (answers) {
      var answer = answers[0];
      if (current() !== m) return;
      if (answer.status === 404) {  // not discoverable here after all (the listing said otherwise): nothing to show
        card.hidden = true;
        return;
      }
      if (answer.status === 503) {
        state.discovered = null;
        drawDiscovered(m, null);
        discoveredState("wait", "No discovery result yet: " + ((answer.doc && answer.doc.error) || answer.error) + ".");
        return;
      }
      if (answer.status !== 200 || !answer.doc) {
        state.discoveredKey = null;
        discoveredState("error", "The API answered an error for /discovered?metric=" + m.name + ": " + answer.error + ".");
        return;
      }
      state.discovered = answer.doc;
      discoveredState(answer.doc.stale ? "busy" : null, answer.doc.stale
        ? "The latest discovery pass failed (" + str(answer.doc.error) + "); showing the previous result." : null);
      drawDiscovered(m, answer.doc);
    });
  }

  function drawDiscovered(m, doc) {
    var table = $("discovered-table"), summary = $("discovered-summary");
    if (!doc) { table.replaceChildren(); summary.textContent = ""; return; }
    var found = doc.discovered || [];
    var t = discoveryTruthFor(m);
    var pass = doc.window || {};
    var span = pass.from && pass.to ? " over " + timeText(Date.parse(pass.from) / 1000) + "–" + timeText(Date.parse(pass.to) / 1000) : "";
    var threshold = num(doc.detection_threshold);
    summary.textContent = "Latest discovery pass" + (doc.computed_at ? " at " + timeText(Date.parse(doc.computed_at) / 1000) : "") + span +
      ": " + int(doc.reports) + " discovery reports, " + plural(found.length, "value") + " found. " +
      "Each one cleared every level's cut-off; the chance that any value nobody holds is listed is at most " +
      (num(doc.alpha) != null ? Math.round(doc.alpha * 1000) / 10 : 5) + " %." +
      (threshold != null ? " A value needs about " + pct(threshold) + " of the reports to be found in this window." : "") +
      (t ? " ◆ true frequency of the simulated fleet." : "");
    var max = Math.max.apply(null, found.map(function (r) { return num(r.frequency) || 0; }).concat([1e-9]));
    var head = ["Value", "Estimate", "CI low", "CI high", "Estimated count", "Found at level", "Notes"].concat(t ? ["True frequency"] : []);
    var rows = found.map(function (r) {
      var notes = [];
      if (r.truncated) notes.push("first " + (doc.domain && doc.domain.max_length ? doc.domain.max_length + " " : "") + "symbols only");
      if (r.cut_inside_character) notes.push("cut inside a character (exact bytes on hover)");
      else if (r.bytes_hex) notes.push("not UTF-8 (exact bytes on hover)");
      if (r.selection_biased) notes.push("selection-biased estimate");
      var f = num(r.frequency), truth = t ? (t.freq[str(r.value)] != null ? t.freq[str(r.value)] : 0) : null;
      var bar = el("span", { class: "mini-bar", "aria-hidden": "true" });
      bar.style.width = Math.max(0, Math.min(100, (f || 0) / max * 100)).toFixed(1) + "%";
      // value: valid text (U+FFFD where its bytes are not whole characters: docs/discovery.md), bytes_hex exact
      var valueCell = el("th", withBytes({ scope: "row", class: "value", text: str(r.value) }, r.bytes_hex, r.cut_inside_character));
      return el("tr", { "data-value": str(r.value) }, [
        valueCell,
        el("td", { class: "num est", "data-raw": String(f) }, [el("span", { class: "mini-track" }, [bar]), " " + pct(f)]),
        el("td", { class: "num ci-low", "data-raw": String(num(r.ci_low)), text: pct(r.ci_low) }),
        el("td", { class: "num ci-high", "data-raw": String(num(r.ci_high)), text: pct(r.ci_high) }),
        el("td", { class: "num", text: int(r.count) }),
        el("td", { class: "num", text: str(r.found_at_level) }),
        el("td", { class: "notes", text: notes.join("; ") || "—" }),
      ].concat(t ? [el("td", { class: "num truth", "data-raw": String(truth), text: "◆ " + pct(truth) })] : []));
    });
    if (!rows.length) {
      table.replaceChildren(el("p", { class: "empty-note", text: num(doc.reports)
        ? "No value is frequent enough to be found in this window yet" + (threshold != null ? " (it takes about " + pct(threshold) + ")" : "") +
          "; more reports lower the threshold."
        : "No discovery reports in this window yet." }));
      return;
    }
    table.replaceChildren(el("table", { class: "data", id: "discovered-data" }, [
      el("caption", { text: "Values found by the latest pass, largest first; frequencies in percent of its " + int(doc.reports) + " reports" }),
      el("thead", {}, [el("tr", {}, head.map(function (h) { return el("th", { scope: "col", text: h }); }))]),
      el("tbody", {}, rows),
    ]));
  }

  // ---------------------------------------------------------- chart plumbing
  function chartWidth(container) { return Math.max(280, container.clientWidth || container.parentNode.clientWidth || 600); }

  function destroyChart(name) {
    if (state.charts[name]) { state.charts[name].destroy(); state.charts[name] = null; }
  }

  function renderLegend(id, items) {
    $(id).replaceChildren.apply($(id), items.map(function (item) {
      var swatch = el("span", { class: "swatch swatch-" + item.shape, "aria-hidden": "true" });
      swatch.style.setProperty("--c", item.color);
      return el("span", { class: "legend-item" }, [swatch, item.text]);
    }));
  }

  function resizeCharts() {
    var chart = state.charts.trend;
    if (chart) chart.setSize({ width: chartWidth($("trend-chart")), height: 300 });
    var bars = $("topk-chart").querySelector("svg.bars");
    if (bars && state.topRows.length && Number(bars.getAttribute("width")) !== chartWidth($("topk-chart"))) {
      drawBars($("topk-chart"), state.topRows, state.topFloor);
    }
  }

  // ----------------------------------------------------------------- events
  function wire() {
    $("metrics").addEventListener("click", function (e) {
      var button = e.target.closest("button.pick");
      if (!button) return;
      selectMetric(button.getAttribute("data-metric"));
      $("metric").scrollIntoView({ block: "start" });  // the table is below the charts
    });
    // Arrow keys move between metrics (one tab stop for the list's buttons is the table's order).
    $("metrics").addEventListener("keydown", function (e) {
      if (e.key !== "ArrowDown" && e.key !== "ArrowUp") return;
      var buttons = Array.prototype.slice.call($("metrics").querySelectorAll("button.pick"));
      var i = buttons.indexOf(document.activeElement);
      if (i < 0) return;
      e.preventDefault();
      var next = buttons[Math.max(0, Math.min(buttons.length - 1, i + (e.key === "ArrowDown" ? 1 : -1)))];
      next.focus();
    });
    $("metric-select").addEventListener("change", function () { selectMetric($("metric-select").value); });
    ["k", "postprocess", "window"].forEach(function (id) {
      $(id).addEventListener("change", function () { linkNote(null); writeView(); poll(); });
    });
    $("version").addEventListener("change", function () {
      state.version = $("version").value; state.trendKey = null;
      renderVersions(); renderParams(); renderSteps(); renderMetrics();
      writeView();
      poll();
    });
    $("range").addEventListener("change", function () { $("step").removeAttribute("data-chosen"); renderSteps(); writeView(); poll(); });
    $("step").addEventListener("change", function () { $("step").setAttribute("data-chosen", "true"); writeView(); poll(); });
    $("poll").addEventListener("change", function () { writeView(); schedule(); if (Number($("poll").value) > 0) poll(); });
    $("trend-values").addEventListener("change", function (e) {
      var v = e.target.getAttribute("data-trend-value");
      if (v == null) return;
      state.trendChosenByUser = true;
      var at = state.trendValues.indexOf(v);
      if (e.target.checked && at < 0 && state.trendValues.length < MAX_TREND_VALUES) state.trendValues.push(v);
      if (!e.target.checked && at >= 0) state.trendValues.splice(at, 1);
      $("trend-values").removeAttribute("data-key");
      if (state.top) chooseTrendValues(state.top);
      writeView();
      poll();
    });
    Array.prototype.forEach.call(document.querySelectorAll("button.toggle"), function (button) {
      button.addEventListener("click", function () {
        var open = button.getAttribute("aria-expanded") !== "true";
        button.setAttribute("aria-expanded", String(open));
        button.textContent = open ? "Show as chart" : "Show as table";
        $(button.getAttribute("aria-controls")).hidden = !open;
        var chart = $(button.getAttribute("data-chart"));
        chart.hidden = open;
        chart.parentNode.hidden = open;
        if (!open) resizeCharts();
      });
    });
    document.addEventListener("visibilitychange", function () {
      if (!document.hidden && Number($("poll").value) > 0) poll();
    });
    if (window.ResizeObserver) new ResizeObserver(resizeCharts).observe(document.querySelector("main"));
    else window.addEventListener("resize", resizeCharts);
  }

  $("time-zone").textContent = TIME_ZONE;
  state.wanted = readView();
  state.wanted.ignored = applyWantedOptions(state.wanted);
  wire();
  poll();
})();
