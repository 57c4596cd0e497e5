#include "runtime/observe/timeline_svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "runtime/util/text.hpp"

namespace actorpipe {

namespace {

// Dark for chunk 0, lighter for later chunks (interleaved schedules).
const char* colour(op_kind k, int chunk) {
  static const char* f[] = {"#4C78A8", "#7FA7D0", "#A9C6E6", "#CFE0F2"};
  static const char* b[] = {"#3B7D34", "#54A24B", "#88C97E", "#B8E0B0"};
  static const char* w[] = {"#C4640A", "#F58518", "#F8A95A", "#FBCB96"};
  const int c = chunk < 0 ? 0 : chunk > 3 ? 3 : chunk;
  switch (k) {
    case op_kind::F: return f[c];
    case op_kind::B: return b[c];
    case op_kind::W: return w[c];
  }
  return "#999999";
}

const char* input_colour(int chunk) {
  static const char* i[] = {"#2A8C86", "#72B7B2", "#A3D3CF", "#CDE8E6"};
  return i[chunk < 0 ? 0 : chunk > 3 ? 3 : chunk];
}

}  // namespace

std::string timeline_svg(const std::string& title, const std::vector<timeline_lane>& lanes,
                         double span, const std::string& unit, double bubble_span) {
  if (bubble_span <= 0) bubble_span = span;
  const double left = 80, right = 90, top = 34, lane_h = 26, gap = 6, plot_w = 960;
  const double height = top + lanes.size() * (lane_h + gap) + 40;
  const double width = left + plot_w + right;
  const double scale = span > 0 ? plot_w / span : 0.0;
  std::ostringstream os;
  os << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << fmt("%.2f", width) << "\" height=\""
     << fmt("%.2f", height) << "\" viewBox=\"0 0 " << fmt("%.2f", width) << " " << fmt("%.2f", height)
     << "\" font-family=\"sans-serif\" font-size=\"11\">\n";
  os << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  os << "<text x=\"" << fmt("%.2f", left) << "\" y=\"20\" font-size=\"14\">" << xml_escape(title) << "</text>\n";
  for (size_t i = 0; i < lanes.size(); ++i) {
    const double y = top + i * (lane_h + gap);
    double busy = 0.0;
    os << "<g class=\"lane\" data-lane=\"" << i << "\">\n";
    os << "<text x=\"" << fmt("%.2f", left - 8) << "\" y=\"" << fmt("%.2f", y + lane_h * 0.65)
       << "\" text-anchor=\"end\">" << xml_escape(lanes[i].name) << "</text>\n";
    os << "<rect x=\"" << fmt("%.2f", left) << "\" y=\"" << fmt("%.2f", y) << "\" width=\"" << fmt("%.2f", plot_w)
       << "\" height=\"" << fmt("%.2f", lane_h) << "\" fill=\"#f4f4f4\"/>\n";
    for (const auto& b : lanes[i].blocks) {
      const bool op = b.kind == block_kind::op;
      if (op) busy += b.end - b.start;  // the bubble counts compute only
      const double x = left + b.start * scale;
      const double w = std::max(0.5, (b.end - b.start) * scale);
      const char* fill = b.kind == block_kind::allreduce   ? "#9467BD"
                         : b.kind == block_kind::optimizer ? "#555555"
                         : b.input_grad                    ? input_colour(b.op.chunk)
                                                           : colour(b.op.kind, b.op.chunk);
      std::string name = b.kind == block_kind::allreduce   ? std::string("allreduce")
                         : b.kind == block_kind::optimizer ? std::string("optimizer step")
                         : b.input_grad                    ? "I" + to_string(b.op).substr(1)
                                                           : to_string(b.op);
      os << "<rect class=\"" << (op ? "op" : b.kind == block_kind::allreduce ? "allreduce" : "optimizer")
         << "\" x=\"" << fmt("%.2f", x) << "\" y=\"" << fmt("%.2f", y) << "\" width=\"" << fmt("%.2f", w) << "\" height=\""
         << fmt("%.2f", lane_h) << "\" fill=\"" << fill << "\" stroke=\"white\" stroke-width=\"0.5\"><title>" << name
         << " [" << fmt("%.2f", b.start) << ", " << fmt("%.2f", b.end) << "] " << unit << "</title></rect>\n";
      if (w >= 12)
        os << "<text x=\"" << fmt("%.2f", x + w / 2) << "\" y=\"" << fmt("%.2f", y + lane_h * 0.65)
           << "\" text-anchor=\"middle\" fill=\"white\">"
           << (op ? std::to_string(b.op.mb) : b.kind == block_kind::allreduce ? std::string("AR") : std::string("opt"))
           << "</text>\n";
    }
    const double bubble = bubble_span > 0 ? 1.0 - busy / bubble_span : 0.0;
    os << "<text x=\"" << fmt("%.2f", left + plot_w + 6) << "\" y=\"" << fmt("%.2f", y + lane_h * 0.65)
       << "\">bubble " << fmt("%.2f", bubble * 100) << "%</text>\n</g>\n";
  }
  const double axis_y = top + lanes.size() * (lane_h + gap) + 4;
  os << "<line x1=\"" << fmt("%.2f", left) << "\" y1=\"" << fmt("%.2f", axis_y) << "\" x2=\"" << fmt("%.2f", left + plot_w)
     << "\" y2=\"" << fmt("%.2f", axis_y) << "\" stroke=\"#333\"/>\n";
  for (int k = 0; k <= 10; ++k) {
    const double t = span * k / 10.0;
    const double x = left + t * scale;
    os << "<line x1=\"" << fmt("%.2f", x) << "\" y1=\"" << fmt("%.2f", axis_y) << "\" x2=\"" << fmt("%.2f", x) << "\" y2=\""
       << fmt("%.2f", axis_y + 4) << "\" stroke=\"#333\"/><text x=\"" << fmt("%.2f", x) << "\" y=\""
       << fmt("%.2f", axis_y + 16) << "\" text-anchor=\"middle\">" << fmt("%.2f", t) << "</text>\n";
  }
  os << "<text x=\"" << fmt("%.2f", left + plot_w) << "\" y=\"" << fmt("%.2f", axis_y + 30)
     << "\" text-anchor=\"end\">time (" << xml_escape(unit)
     << ")  F blue, B green, I teal, W orange, lighter for later chunks; numbers are microbatches;"
        " AR allreduce, opt optimizer step</text>\n";
  os << "</svg>\n";
  return os.str();
}

}  // namespace actorpipe
