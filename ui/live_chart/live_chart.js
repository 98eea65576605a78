// One live chart: every render from Streamlit redraws the same div with Plotly.react, which
// updates the plot in place, so the chart never goes blank between two refreshes.
// Speaks Streamlit's component messages directly (componentReady, render, setFrameHeight).
(function () {
  "use strict";
  var chart = document.getElementById("chart");
  var frameHeight = 0;
  var last = null;          // the latest render's arguments, redrawn when the window resizes
  var CHAR_EM = 0.56;       // a character's mean width, in font sizes
  var MIN_TOP = 80;         // the least room above a plot (analysis/style.py's layout)

  function send(type, data) {
    var message = { isStreamlitMessage: true, type: type };
    for (var k in data) message[k] = data[k];
    window.parent.postMessage(message, "*");
  }

  function wrapLine(line, perLine) {
    var out = [], current = "";
    line.split(" ").forEach(function (word) {
      if (current && (current + " " + word).length > perLine) {
        out.push(current);
        current = word;
      } else {
        current = current ? current + " " + word : word;
      }
    });
    if (current) out.push(current);
    return out;
  }

  // A subtitle wider than the chart is cut off on both sides (plotly does not wrap text):
  // wrap it to the chart's width, and give the space above the plot what its lines need.
  function fitSubtitle(layout, width) {
    var sub = layout.title && layout.title.subtitle;
    if (!sub || !sub.text || !width) return 0;
    var px = (sub.font && sub.font.size) || (layout.font && layout.font.size) || 12;
    var perLine = Math.max(16, Math.floor((width - 24) / (CHAR_EM * px)));
    var lines = sub.text.split("<br>");
    var wrapped = wrapLine(lines.join(" "), perLine);    // rewrapped as one paragraph
    sub.text = wrapped.join("<br>");
    layout.margin = layout.margin || {};
    var top = layout.margin.t || MIN_TOP;
    var newTop = Math.max(MIN_TOP, top + Math.round((wrapped.length - lines.length) * 1.4 * px));
    layout.margin.t = newTop;
    return newTop - top;
  }

  function draw(args) {
    last = args;
    var figure = JSON.parse(args.figure_json || "{}");   // a new object each time: wrapped, then drawn
    var layout = figure.layout || {};
    if (!layout.template && window.PLOTLY_TEMPLATE) layout.template = window.PLOTLY_TEMPLATE;   // one object, kept
    var height = args.height + fitSubtitle(layout, chart.clientWidth || window.innerWidth);
    layout.height = height;
    if (height !== frameHeight) {
      frameHeight = height;
      chart.style.height = frameHeight + "px";
      send("streamlit:setFrameHeight", { height: frameHeight });
    }
    Plotly.react(chart, figure.data || [], layout, args.config || {});
  }

  window.addEventListener("message", function (event) {
    var data = event.data;
    if (!data || data.type !== "streamlit:render") return;
    // A page that did not rebuild a figure sends the same text again: nothing to redraw.
    if (last && data.args.figure_json === last.figure_json && data.args.height === last.height) return;
    draw(data.args);
  });
  window.addEventListener("resize", function () { if (last) draw(last); });

  send("streamlit:componentReady", { apiVersion: 1 });
})();
