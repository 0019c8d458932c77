// The dashboard page's files (src/ui/ and the chart library uPlot), embedded in the binary at
// build time (cmake/EmbedFiles.cmake) so that a coordinator serves /ui/ with nothing installed
// beside it and nothing fetched from elsewhere.
#ifndef KILN_UI_ASSETS_H_
#define KILN_UI_ASSETS_H_

#include <cstddef>
#include <string_view>

namespace kiln::ui {

struct Asset {
  std::string_view name;  // "index.html", "app.js", "uPlot.iife.min.js", ...
  std::string_view content_type;
  std::string_view body;
};

// The asset called `name` (no directory); null when there is none.
const Asset* find_asset(std::string_view name);

}  // namespace kiln::ui

#endif  // KILN_UI_ASSETS_H_
