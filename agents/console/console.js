/* OCMS live console: polls the worker's HTTP API and draws it with uPlot.
 *
 * Read-only. It speaks the worker's metric names: the metric listing
 * (/metrics?format=json), then per metric /metrics/NAME/topk, /trend and, for
 * version=combined, /estimates. Every answer is shown as the API gave it
 * (numbers are not re-estimated here); tables carry the exact API numbers in
 * data-raw attributes next to their formatted text. Values are names (the
 * API's rule: every value is a JSON string; numbers are tolerated).
 */
(function () {
  "use strict";

  var MAX_TREND_VALUES = 5;
  var TREND_POINTS_TARGET = 120;
  var TREND_REFRESH_MS = 10000;
  var COMBINED = "combined";
  var COLORS = ["#1f5fa8", "#b8470b", "#2a7f3f", "#7b3fa0", "#8a6d00"];

  var state = {
    listing: null,         // last /metrics?format=json document
    selected: null,        // name of the shown metric
    version: null,         // shown version of it: "1", "2" ... or "combined"
    health: null,
    rates: {},             // metric name -> [{t, n}] samples for reports/s
    lastChange: {},        // metric name -> time (ms) the report count last grew
    pageLoaded: Date.now(),
    truth: null,           // last /console/truth document
    top: null,             // last top-K document (a /topk answer, or built from a combined /estimates)
    trendValues: [],       // value names chosen for the trend
    trendChosenByUser: false,
    trend: {},
    timer: null,
    polling: false,
    charts: {},
  };

  // ------------------------------------------------------------ helpers
  function $(id) { return document.getElementById(id); }

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (key) {
        if (key === "text") node.textContent = attrs[key];
        else if (key === "class") node.className = attrs[key];
        else node.setAttribute(key, attrs[key]);
      });
    }
    (children || []).forEach(function (c) { if (c != null) node.appendChild(typeof c === "string" ? document.createTextNode(c) : c); });
    return node;
  }

  function num(x) { var v = typeof x === "string" ? Number(x) : x; return typeof v === "number" && isFinite(v) ? v : null; }
  function pct(x) { var v = num(x); return v == null ? "–" : (v * 100).toFixed(2) + " %"; }
  function int(x) { var v = num(x); return v == null ? "–" : Math.round(v).toLocaleString("en-US"); }
  function str(v) { return v == null ? "" : String(v); }
  function plural(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }

  function ago(ms) {
    var s = Math.max(0, Math.round(ms / 1000));
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

  /** GET a JSON answer: {status, doc} or {status: 0, error} when unreachable. Never throws. */
  function api(path) {
    var controller = new AbortController();
    var timeout = setTimeout(function () { controller.abort(); }, 8000);
    return fetch(path, { signal: controller.signal, headers: { Accept: "application/json" }, cache: "no-store" })
      .then(function (response) {
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

  // --------------------------------------------------------- metric facts
  function metrics() { return (state.listing && state.listing.metrics) || []; }
  function current() {
    var all = metrics();
    for (var i = 0; i < all.length; i++) if (all[i].name === state.selected) return all[i];
    return null;
  }
  function versionsOf(m) { return (m && m.versions) || []; }
  function newest(m) { var v = versionsOf(m); return v.length ? v[v.length - 1] : null; }
  function isCombined() { return state.version === COMBINED; }

  /** The version document shown: the chosen one; for "combined" the newest (what trends read). */
  function currentVersion() {
    var m = current();
    if (!m) return null;
    var all = versionsOf(m);
    for (var i = 0; i < all.length; i++) if (String(all[i].version) === state.version) return all[i];
    return newest(m);
  }

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

  function mechanism(v, short) {
    var name = v.mechanism == null ? "ocms" : str(v.mechanism);
    var text = (short ? SHORT_MECHANISMS : MECHANISMS)[name] || name;
    if (!v.mode) return text;
    if (short) return text + " (" + (v.mode === "l2" ? "L2" : v.mode === "mse" ? "MSE" : v.mode) + ")";
    return text + ", tuned for " + (v.mode === "l2" ? "L2 loss" : v.mode === "mse" ? "worst-case MSE" : v.mode);
  }

  /** Display name of a value: its name; with a truth file naming it otherwise (a legacy
   *  worker's integer ids), "ATL (4)". */
  function valueLabel(value) {
    var v = str(value);
    var t = truthFor(current());
    if (t && t.labels[v] != null && t.labels[v] !== v) return t.labels[v] + " (" + v + ")";
    return v;
  }

  /** The shortest name of a value (for axis ticks): its name alone when it has one. */
  function valueName(value) {
    var full = valueLabel(value), v = str(value);
    var suffix = " (" + v + ")";
    return full.length > suffix.length && full.slice(-suffix.length) === suffix ? full.slice(0, -suffix.length) : full;
  }

  /** The truth of the simulated fleet for metric m, indexed by value and by value name, or null.
   *  It belongs to m when its fingerprint is one of m's live versions (combined: any of them). */
  function truthFor(m) {
    var t = state.truth;
    if (!t || !t.available || !m) return null;
    if (t.metric && t.metric !== m.name) return null;
    var fps = isCombined() ? versionsOf(m).map(function (v) { return v.fingerprint; })
      : [currentVersion() && currentVersion().fingerprint];
    if (t.fingerprint && fps.indexOf(t.fingerprint) < 0) return null;
    if (!t._index) {
      t._index = { freq: {}, labels: {} };
      t.counts.forEach(function (c) {
        t._index.freq[str(c.value)] = t.reports ? c.count / t.reports : 0;
        t._index.labels[str(c.value)] = str(c.label);
        // A registry worker answers values by name (ATL, not its id 4): index the name too.
        if (c.label != null && t._index.freq[str(c.label)] == null) t._index.freq[str(c.label)] = t._index.freq[str(c.value)];
      });
    }
    return t._index;
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
        if (!state.selected || !current()) chooseMetric(metrics()[0] ? metrics()[0].name : null);
        else if (!isCombined() && !versionsOf(current()).some(function (v) { return String(v.version) === state.version; })) {
          state.version = newest(current()) ? String(newest(current()).version) : null;  // a version retired
        } else if (isCombined() && versionsOf(current()).length < 2) {
          state.version = newest(current()) ? String(newest(current()).version) : null;
        }
        renderMetrics();
        renderVersions();
        renderParams();
        renderSteps();
        if (starting) {
          metricState("wait", "Waiting for the worker to finish starting.");
          return;
        }
        return refreshMetric();
      });
    }).then(function () {
      $("updated").textContent = "updated " + new Date().toLocaleTimeString("en-GB");
    });
  }

  function chooseMetric(name) {
    state.selected = name;
    var v = newest(current());
    state.version = v ? String(v.version) : null;  // devices report the newest live version
    state.trendValues = []; state.trendChosenByUser = false; state.trend = {}; state.trendKey = null;
  }

  function noteRates() {
    var now = Date.now();
    metrics().forEach(function (m) {
      var samples = state.rates[m.name] || (state.rates[m.name] = []);
      var n = num(m.reports) || 0;
      var last = samples[samples.length - 1];
      if (!last || n > last.n) state.lastChange[m.name] = last ? now : state.lastChange[m.name] || null;
      samples.push({ t: now, n: n });
      while (samples.length > 2 && now - samples[0].t > 15000) samples.shift();
    });
  }

  function rateOf(name) {
    var s = state.rates[name] || [];
    if (s.length < 2) return null;
    var a = s[0], b = s[s.length - 1];
    return b.t > a.t ? Math.max(0, (b.n - a.n) / ((b.t - a.t) / 1000)) : null;
  }

  function metricPath(m, endpoint) { return "/metrics/" + encodeURIComponent(m.name) + "/" + endpoint; }

  /** The top values of the shown metric and version: /topk, or for "combined" the combined
   *  /estimates sorted by estimate (the API answers combined estimates, not a combined top-K). */
  function fetchTop(m, k) {
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

  function refreshMetric() {
    var m = current(), v = currentVersion();
    if (!m || !v) { metricState("empty", "This worker serves no metric."); drawTop(null); return Promise.resolve(); }
    var k = Math.min(Number($("k").value), num(v.tracked_values) || 10);
    return Promise.all([fetchTop(m, k), api("/console/truth")]).then(function (answers) {
      var top = answers[0], truth = answers[1];
      if (truth.status === 200 && truth.doc) { state.truth = truth.doc; }
      else if (truth.status !== 503) { state.truth = null; }  // 503: keep the last truth through a busy moment
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
        metricState("withheld", withheldText(m, top.doc));
        drawTop(null, withheldText(m, top.doc));
        chooseTrendValues(top.doc);
        return refreshTrend(m);  // a trend withholds point by point: older buckets may be published
      }
      if (!num(top.doc.n)) {
        metricState("empty", "No reports counted for " + versionLabel(m) + " in this window yet; the charts fill in as reports arrive.");
      } else {
        metricState(null);
      }
      drawTop(top.doc);
      chooseTrendValues(top.doc);
      return refreshTrend(m);
    });
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
    var parts = [changed ? "new reports " + ago(Date.now() - changed)
      : (num(m.reports) ? "no new report since the page opened" : "no reports yet")];
    if (num(m.latest_bucket_start) != null) parts.push("newest bucket " + new Date(num(m.latest_bucket_start) * 1000).toLocaleTimeString("en-GB"));
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
        el("th", { scope: "row" }, [button]),
        description,
        el("td", { text: str(m.unit) || "—" }),
        el("td", { class: "num", text: epsilons(m) }),
        el("td", { title: mechanisms(m), text: mechanisms(m, true) }),
        el("td", { class: "num", text: versionsOf(m).map(function (v) { return v.version; }).join(", ") }),
        el("td", { class: "num", "data-raw": str(m.reports), text: int(m.reports) }),
        el("td", { class: "num", text: rate == null ? "measuring…" : rate.toFixed(rate < 10 ? 1 : 0) }),
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

  function selectMetric(name) {
    if (name === state.selected) return;
    chooseMetric(name);
    renderMetrics(); renderVersions(); renderParams(); renderSteps();
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
    pp.disabled = isCombined();
    if (isCombined()) pp.value = "none";
    $("combined-note").hidden = !isCombined();
  }

  // ----------------------------------------------------------- parameters
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
        ". k reports from one device about the same value add up to k·ε.",
      "What the server sees besides the report: its timing and the device key used for partitioning. " +
        "Estimates are computed from reports only, so they cannot weaken the guarantee.",
      "Estimates: " + int(v.tracked_values) + " tracked values out of " + domain +
        (m.unit ? " (unit: " + m.unit + ")" : "") + "; each estimate is the value's share of the reports counted, with a " +
        (state.top && num(state.top.confidence) ? Math.round(state.top.confidence * 100) : 95) + " % confidence interval." +
        (num(v.min_reports) ? " A window with fewer than " + int(v.min_reports) + " reports is withheld: no estimate is published for it." : ""),
    ];
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

  function renderSteps() {
    var select = $("step"), v = currentVersion();
    var levels = (v && v.levels) || (v ? [{ bucket_seconds: v.bucket_seconds, retention_seconds: v.retention_seconds }] : []);
    var base = levels.length ? num(levels[0].bucket_seconds) : 60;
    // Ranges longer than the longest retention have no buckets to show (and the API refuses them).
    var longest = Math.max.apply(null, levels.map(function (l) { return num(l.retention_seconds) || 0; }).concat([0]));
    var rangeSelect = $("range");
    if (longest > 0) {
      Array.prototype.forEach.call(rangeSelect.options, function (o) { o.disabled = Number(o.value) > longest; });
      if (rangeSelect.selectedOptions[0] && rangeSelect.selectedOptions[0].disabled) {
        var allowed = Array.prototype.filter.call(rangeSelect.options, function (o) { return !o.disabled; });
        if (allowed.length) rangeSelect.value = allowed[allowed.length - 1].value;
      }
    }
    var range = Number(rangeSelect.value);
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
      var previous = Number(select.value);
      select.replaceChildren.apply(select, options.map(function (s) { return el("option", { value: String(s), text: duration(s) }); }));
      select.value = String(options.indexOf(previous) >= 0 ? previous : auto);
      select.setAttribute("data-options", key);
    }
  }

  // --------------------------------------------------------------- top-K
  function topRows(doc) {
    var p = current(), t = truthFor(p), processed = doc.postprocess && doc.postprocess !== "none";
    return (doc.top || []).map(function (r) {
      var v = str(r.value);
      return {
        value: v, label: valueLabel(v), short: valueName(v),
        estimate: num(processed ? r.processed : r.frequency), raw: num(r.frequency), processed: num(r.processed),
        low: num(r.ci_low), high: num(r.ci_high), count: num(processed ? r.processed_count : r.count),
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
    $("topk-summary").textContent = doc
      ? "n = " + int(doc.n) + " reports counted · " + Math.round(num(doc.confidence) * 100) + " % " + str(doc.interval) +
        " confidence intervals (whiskers) · " + (doc.postprocess === "none" ? "raw unbiased estimates" : "post-processed (" + doc.postprocess + ")") +
        (hasTruth ? " · ◆ true frequency of the simulated fleet" : "")
      : "";
    renderLegend("topk-legend", doc && rows.length ? [{ color: COLORS[0], text: "estimated frequency (%)", shape: "bar" },
      { color: "#222", text: "confidence interval", shape: "whisker" }].concat(hasTruth ? [{ color: "#e07b00", text: "true frequency (%)", shape: "diamond" }] : []) : []);
    container.setAttribute("aria-label", rows.length
      ? "Bar chart of the " + rows.length + " most frequent values; the largest is " + rows[0].label + " at " + pct(rows[0].estimate) + ". Use “Show as table” for all numbers."
      : "No estimates to chart");
    container.setAttribute("data-values", rows.map(function (r) { return r.value; }).join("\n"));
    container.setAttribute("data-ticks", rows.map(function (r) { return shortLabel(r.short); }).join("\n"));  // the axis' text
    renderTopTable(rows, doc, hasTruth);
    if (!rows.length) {
      destroyChart("topk");
      container.replaceChildren(el("p", { class: withheld ? "empty withheld" : "empty",
        text: withheld ? "Withheld: too few reports in this window to publish estimates." : doc ? "No values to show yet." : "No data." }));
      return;
    }
    var xs = rows.map(function (_, i) { return i; });
    var data = [xs, rows.map(function (r) { return r.estimate * 100; })];
    var yMin = 0, yMax = 0;
    rows.forEach(function (r) {
      yMin = Math.min(yMin, r.low * 100, r.estimate * 100);
      yMax = Math.max(yMax, r.high * 100, r.estimate * 100, r.truth != null ? r.truth * 100 : 0);
    });
    var chart = state.charts.topk;
    var structure = rows.length + "|" + hasTruth;
    state.topRows = rows;
    if (chart && chart._structure === structure) {
      chart._range = [yMin, yMax];
      chart.setData(data);
      return;
    }
    destroyChart("topk");
    container.replaceChildren();
    var opts = {
      width: chartWidth(container), height: 300,
      legend: { show: false },
      cursor: { show: false },
      scales: {
        x: { time: false, range: function () { return [-0.5, state.topRows.length - 0.5]; } },
        y: { range: function (u) { var r = u._range; var pad = (r[1] - r[0]) * 0.08 || 1; return [r[0] < 0 ? r[0] - pad : 0, r[1] + pad]; } },
      },
      axes: [
        { label: "value", splits: function () { return state.topRows.map(function (_, i) { return i; }); },
          values: function (u, splits) { return splits.map(function (i) { var r = state.topRows[i]; return r ? shortLabel(r.short) : ""; }); },
          rotate: rows.length > 10 ? -45 : 0, size: rows.length > 10 ? 70 : 40, gap: 4 },
        { label: "frequency (%)", values: function (u, splits) { return splits.map(function (v) { return v.toFixed(v < 1 && v > -1 ? 2 : 1); }); }, size: 60 },
      ],
      series: [
        {},
        { label: "estimated frequency (%)", fill: COLORS[0] + "cc", stroke: COLORS[0], width: 1,
          paths: uPlot.paths.bars({ size: [0.6, 80] }), points: { show: false } },
      ],
      hooks: { draw: [drawWhiskersAndTruth] },
    };
    chart = new uPlot(opts, data, container);
    chart._structure = structure;
    chart._range = [yMin, yMax];
    state.charts.topk = chart;
    chart.redraw();
  }

  /** At most 14 characters: whole code points (slicing UTF-16 units could split an emoji in two). */
  function shortLabel(text) { var chars = Array.from(text); return chars.length > 14 ? chars.slice(0, 13).join("") + "…" : text; }

  /** A value whose bytes are not whole characters (a discovered prefix cut inside one) arrives as text
   *  with U+FFFD at the cut plus its exact bytes (bytes_hex, docs/discovery.md): shown on hover. */
  function withBytes(attrs, bytesHex, cut) {
    if (bytesHex) {
      attrs.title = "exact bytes (hex): " + bytesHex + (cut ? " (cut inside a character)" : "");
      attrs["data-bytes"] = bytesHex;
    }
    return attrs;
  }

  function drawWhiskersAndTruth(u) {
    var ctx = u.ctx, rows = state.topRows || [], dpr = window.devicePixelRatio || 1;
    var slot = Math.abs(u.valToPos(1, "x", true) - u.valToPos(0, "x", true)) || 40 * dpr;
    var cap = Math.min(slot * 0.15, 8 * dpr);
    ctx.save();
    rows.forEach(function (r, i) {
      var x = u.valToPos(i, "x", true);
      if (r.low != null && r.high != null) {
        var y0 = u.valToPos(r.low * 100, "y", true), y1 = u.valToPos(r.high * 100, "y", true);
        ctx.strokeStyle = "#222"; ctx.lineWidth = 1.5 * dpr;
        ctx.beginPath();
        ctx.moveTo(x, y0); ctx.lineTo(x, y1);
        ctx.moveTo(x - cap, y0); ctx.lineTo(x + cap, y0);
        ctx.moveTo(x - cap, y1); ctx.lineTo(x + cap, y1);
        ctx.stroke();
      }
      if (r.truth != null) {
        var tx = x + Math.min(slot * 0.3, 22 * dpr) + 5 * dpr, ty = u.valToPos(r.truth * 100, "y", true), s = 5 * dpr;
        ctx.fillStyle = "#e07b00"; ctx.strokeStyle = "#5a2d00"; ctx.lineWidth = 1 * dpr;
        ctx.beginPath();
        ctx.moveTo(tx, ty - s); ctx.lineTo(tx + s, ty); ctx.lineTo(tx, ty + s); ctx.lineTo(tx - s, ty); ctx.closePath();
        ctx.fill(); ctx.stroke();
      }
    });
    ctx.restore();
  }

  function renderTopTable(rows, doc, hasTruth) {
    var head = ["Rank", "Value", "Estimate", "CI low", "CI high", "Estimated count"].concat(hasTruth ? ["True frequency"] : []);
    var table = el("table", { class: "data", id: "topk-data" }, [
      el("caption", { text: doc ? "Top " + rows.length + " values, frequencies in percent of " + int(doc.n) + " reports" : "No data" }),
      el("thead", {}, [el("tr", {}, head.map(function (h) { return el("th", { scope: "col", text: h }); }))]),
      el("tbody", {}, rows.map(function (r, i) {
        return el("tr", { "data-value": r.value }, [
          el("td", { class: "num", text: String(i + 1) }),
          el("th", withBytes({ scope: "row", class: "value", text: r.label }, r.bytes, r.cut)),
          el("td", { class: "num est", "data-raw": String(r.estimate), text: pct(r.estimate) }),
          el("td", { class: "num ci-low", "data-raw": String(r.low), text: pct(r.low) }),
          el("td", { class: "num ci-high", "data-raw": String(r.high), text: pct(r.high) }),
          el("td", { class: "num", text: int(r.count) }),
        ].concat(hasTruth ? [el("td", { class: "num truth", "data-raw": String(r.truth), text: pct(r.truth) })] : []));
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
    if (!values.length) { drawTrend(p, [], []); state.trendKey = null; return Promise.resolve(); }
    var range = Number($("range").value), step = $("step").value;
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
      drawTrend(p, values, answers.map(function (a) { return a.status === 200 ? a.doc : null; }));
    });
  }

  function trendPointValue(pt, processed) {
    if (!num(pt.n) || pt.withheld) return null;
    return num(processed ? pt.processed : pt.frequency);
  }

  function drawTrend(p, values, docs) {
    var container = $("trend-chart");
    var processed = $("postprocess").value !== "none";
    var usable = [];
    values.forEach(function (v, i) { if (docs[i] && docs[i].points) usable.push({ value: v, doc: docs[i] }); });
    renderLegend("trend-legend", usable.map(function (u, i) {
      return { color: COLORS[i % COLORS.length], text: valueLabel(u.value) + " (%, band: " + Math.round(num(u.doc.confidence) * 100) + " % CI)", shape: "line" };
    }));
    renderTrendTable(usable, processed);
    var allWithheld = usable.length && usable.every(function (u) {
      return u.doc.points.length && u.doc.points.every(function (pt) { return pt.withheld; });
    });
    if (allWithheld) {
      destroyChart("trend");
      container.replaceChildren(el("p", { class: "empty withheld",
        text: "Withheld: every bucket of this range holds fewer reports than min_reports (the table lists them)." }));
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
        lo.push(v == null ? null : num(pt.ci_low) * 100);
        hi.push(v == null ? null : num(pt.ci_high) * 100);
      });
      var base = data.length;
      data.push(est, lo, hi);
      series.push({ label: valueLabel(u.value), stroke: color, width: 2, spanGaps: false, points: { show: xs.length < 60, size: 4 } });
      series.push({ label: "CI low", stroke: "transparent", width: 0, points: { show: false } });
      series.push({ label: "CI high", stroke: "transparent", width: 0, points: { show: false } });
      bands.push({ series: [base + 2, base + 1], fill: color + "33" });
    });
    container.setAttribute("aria-label", "Line chart of " + usable.map(function (u) { return valueLabel(u.value); }).join(", ") +
      " over the " + $("range").selectedOptions[0].text + ", one point per " + duration(Number(usable[0].doc.step)) +
      ", with confidence bands. Use “Show as table” for all numbers.");
    var structure = usable.map(function (u) { return u.value; }).join("|") + "|" + xs.length;
    var chart = state.charts.trend;
    if (chart && chart._structure === structure) { chart.setData(data); return; }
    destroyChart("trend");
    container.replaceChildren();
    chart = new uPlot({
      width: chartWidth(container), height: 300,
      legend: { show: false },
      scales: { x: { time: true }, y: { auto: true } },
      axes: [{ label: "time (bucket start, local time)" }, { label: "frequency (%)", size: 60,
        values: function (u, splits) { return splits.map(function (v) { return v.toFixed(Math.abs(v) < 1 ? 2 : 1); }); } }],
      series: series, bands: bands,
    }, data, container);
    chart._structure = structure;
    state.charts.trend = chart;
  }

  function renderTrendTable(usable, processed) {
    var rows = [];
    usable.forEach(function (u) {
      u.doc.points.forEach(function (pt) {
        var v = trendPointValue(pt, processed);
        rows.push(el("tr", { "data-value": u.value }, [
          el("th", { scope: "row", class: "value", text: valueLabel(u.value) }),
          el("td", { text: new Date(num(pt.from) * 1000).toLocaleString("en-GB") }),
          el("td", { text: duration(num(pt.to) - num(pt.from)) }),
          el("td", { class: "num", text: int(pt.n) }),
          el("td", { class: "num est", "data-raw": String(v), "data-withheld": String(!!pt.withheld), text: pt.withheld ? "withheld" : pct(v) }),
          el("td", { class: "num ci-low", "data-raw": String(v == null ? null : num(pt.ci_low)), text: v == null ? "–" : pct(pt.ci_low) }),
          el("td", { class: "num ci-high", "data-raw": String(v == null ? null : num(pt.ci_high)), text: v == null ? "–" : pct(pt.ci_high) }),
        ]));
      });
    });
    var table = el("table", { class: "data", id: "trend-data" }, [
      el("caption", { text: "Trend points: frequency in percent of the reports counted in each bucket" }),
      el("thead", {}, [el("tr", {}, ["Value", "Bucket start", "Bucket width", "Reports", "Estimate", "CI low", "CI high"]
        .map(function (h) { return el("th", { scope: "col", text: h }); }))]),
      el("tbody", {}, rows),
    ]);
    $("trend-table").replaceChildren(table);
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
    [["topk", "topk-chart"], ["trend", "trend-chart"]].forEach(function (pair) {
      var chart = state.charts[pair[0]];
      if (chart) chart.setSize({ width: chartWidth($(pair[1])), height: 300 });
    });
  }

  // ----------------------------------------------------------------- events
  function wire() {
    $("metrics").addEventListener("click", function (e) {
      var button = e.target.closest("button.pick");
      if (button) selectMetric(button.getAttribute("data-metric"));
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
    ["k", "postprocess", "window"].forEach(function (id) { $(id).addEventListener("change", function () { poll(); }); });
    $("version").addEventListener("change", function () {
      state.version = $("version").value; state.trendKey = null;
      renderVersions(); renderParams(); renderSteps(); renderMetrics();
      poll();
    });
    $("range").addEventListener("change", function () { renderSteps(); poll(); });
    $("step").addEventListener("change", function () { poll(); });
    $("poll").addEventListener("change", function () { schedule(); if (Number($("poll").value) > 0) poll(); });
    $("trend-values").addEventListener("change", function (e) {
      var v = e.target.getAttribute("data-trend-value");
      if (v == null) return;
      state.trendChosenByUser = true;
      var at = state.trendValues.indexOf(v);
      if (e.target.checked && at < 0 && state.trendValues.length < MAX_TREND_VALUES) state.trendValues.push(v);
      if (!e.target.checked && at >= 0) state.trendValues.splice(at, 1);
      $("trend-values").removeAttribute("data-key");
      if (state.top) chooseTrendValues(state.top);
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

  wire();
  poll();
})();
