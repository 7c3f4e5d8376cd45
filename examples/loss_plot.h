// A loss-curve plot as a standalone SVG file (any browser shows it): training loss, validation
// loss and an optional horizontal reference line (e.g. the unigram baseline), against steps.
#pragma once
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace loss_plot {

using Series = std::vector<std::pair<double, double>>;  // (step, loss)

/// The axis titles and the two series' names.
struct Labels {
  std::string x = "step", y = "loss (nats per token)", train = "training loss", val = "validation loss";
};

inline bool write_svg(const std::string& path, const std::string& title, const Series& train,
                      const Series& val, double reference = -1, const std::string& reference_label = "",
                      const Labels& labels = {}) {
  constexpr double W = 760, H = 440, L = 64, R = 24, T = 40, B = 48;  // size and margins
  double x_max = 1, y_min = 1e30, y_max = -1e30;
  for (const Series* s : {&train, &val})
    for (const auto& [x, y] : *s) {
      x_max = std::max(x_max, x);
      y_min = std::min(y_min, y);
      y_max = std::max(y_max, y);
    }
  if (reference > 0) {
    y_min = std::min(y_min, reference);
    y_max = std::max(y_max, reference);
  }
  if (!(y_max > y_min)) {
    y_min -= 1;
    y_max += 1;
  }
  y_min = std::max(0.0, y_min - 0.05 * (y_max - y_min));
  const auto px = [&](double x) { return L + (W - L - R) * x / x_max; };
  const auto py = [&](double y) { return T + (H - T - B) * (1 - (y - y_min) / (y_max - y_min)); };
  const auto num = [](double v, const char* fmt) {
    char buf[32];
    std::snprintf(buf, sizeof buf, fmt, v);
    return std::string(buf);
  };
  const auto polyline = [&](const Series& s, const char* colour, double width) {
    std::string pts;
    for (const auto& [x, y] : s) pts += num(px(x), "%.1f") + "," + num(py(y), "%.1f") + " ";
    return "<polyline fill=\"none\" stroke=\"" + std::string(colour) + "\" stroke-width=\"" +
           num(width, "%.1f") + "\" points=\"" + pts + "\"/>\n";
  };
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(W, "%.0f") + "\" height=\"" +
                    num(H, "%.0f") +
                    "\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" "
                    "fill=\"white\"/>\n";
  svg += "<text x=\"" + num(W / 2, "%.0f") + "\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">" + title +
         "</text>\n";
  for (int i = 0; i <= 5; ++i) {  // grid and tick labels
    const double y = y_min + (y_max - y_min) * i / 5, x = x_max * i / 5;
    svg += "<line x1=\"" + num(L, "%.0f") + "\" x2=\"" + num(W - R, "%.0f") + "\" y1=\"" +
           num(py(y), "%.1f") + "\" y2=\"" + num(py(y), "%.1f") + "\" stroke=\"#e4e4e4\"/>\n";
    svg += "<text x=\"" + num(L - 6, "%.0f") + "\" y=\"" + num(py(y) + 4, "%.1f") +
           "\" text-anchor=\"end\">" + num(y, "%.2f") + "</text>\n";
    svg += "<text x=\"" + num(px(x), "%.1f") + "\" y=\"" + num(H - B + 18, "%.0f") +
           "\" text-anchor=\"middle\">" + num(x, "%.0f") + "</text>\n";
  }
  svg += "<text x=\"" + num((L + W - R) / 2, "%.0f") + "\" y=\"" + num(H - 8, "%.0f") +
         "\" text-anchor=\"middle\">" + labels.x + "</text>\n";
  svg += "<text x=\"16\" y=\"" + num((T + H - B) / 2, "%.0f") + "\" transform=\"rotate(-90 16 " +
         num((T + H - B) / 2, "%.0f") + ")\" text-anchor=\"middle\">" + labels.y + "</text>\n";
  if (reference > 0)
    svg += "<line x1=\"" + num(L, "%.0f") + "\" x2=\"" + num(W - R, "%.0f") + "\" y1=\"" +
           num(py(reference), "%.1f") + "\" y2=\"" + num(py(reference), "%.1f") +
           "\" stroke=\"#888\" stroke-dasharray=\"6 4\"/>\n<text x=\"" + num(W - R - 4, "%.0f") + "\" y=\"" +
           num(py(reference) - 6, "%.1f") + "\" text-anchor=\"end\" fill=\"#666\">" + reference_label +
           "</text>\n";
  svg += polyline(train, "#4a7fd6", 1.2) + polyline(val, "#e0662f", 2.2);
  for (const auto& [x, y] : val)
    svg += "<circle cx=\"" + num(px(x), "%.1f") + "\" cy=\"" + num(py(y), "%.1f") +
           "\" r=\"3\" fill=\"#e0662f\"/>\n";
  svg += "<text x=\"" + num(W - R - 150, "%.0f") + "\" y=\"" + num(T + 14, "%.0f") + "\" fill=\"#4a7fd6\">" +
         labels.train + "</text>\n";
  svg += "<text x=\"" + num(W - R - 150, "%.0f") + "\" y=\"" + num(T + 30, "%.0f") + "\" fill=\"#e0662f\">" +
         labels.val + "</text>\n";
  svg += "<line x1=\"" + num(L, "%.0f") + "\" x2=\"" + num(L, "%.0f") + "\" y1=\"" + num(T, "%.0f") +
         "\" y2=\"" + num(H - B, "%.0f") + "\" stroke=\"black\"/>\n<line x1=\"" + num(L, "%.0f") +
         "\" x2=\"" + num(W - R, "%.0f") + "\" y1=\"" + num(H - B, "%.0f") + "\" y2=\"" + num(H - B, "%.0f") +
         "\" stroke=\"black\"/>\n</svg>\n";
  std::ofstream out(path);
  out << svg;
  return static_cast<bool>(out);
}

}  // namespace loss_plot
