// The dashboard page under /ui/ (api.h): static files embedded in the binary (kiln/ui/assets.h).
// They hold no data and need no token; the page asks for one and sends it with every API call,
// so what it shows is exactly what the API lets that token see.
#include <kiln/sched/api.h>
#include <kiln/ui/assets.h>

namespace kiln::sched {
namespace {

using obs::HttpRequest;
using obs::HttpResponse;

HttpResponse asset_answer(std::string_view name) {
  HttpResponse r;
  const ui::Asset* asset = ui::find_asset(name);
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  if (asset == nullptr) {
    r.status = 404;
    r.body = "no such file under /ui/\n";  // the name is not echoed: nothing of the caller's
    return r;
  }
  r.content_type = std::string(asset->content_type) + "; charset=utf-8";
  r.body = std::string(asset->body);
  // Scripts and styles from this origin only: an injected string cannot run as code. uPlot
  // sets element styles from script, which 'unsafe-inline' for styles allows.
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                         "img-src 'self' data:; frame-ancestors 'none'");
  r.headers.emplace_back("Cache-Control", "no-cache");
  return r;
}

}  // namespace

void add_ui_routes(obs::HttpServer* server) {
  server->route("GET", "/ui", [](const HttpRequest&) {
    HttpResponse r;
    r.status = 302;
    r.headers.emplace_back("Location", "/ui/");
    return r;
  });
  server->route("GET", "/ui/", [](const HttpRequest&) { return asset_answer("index.html"); });
  server->route("GET", "/ui/{file}",
                [](const HttpRequest& r) { return asset_answer(r.path_params.at("file")); });
}

}  // namespace kiln::sched
