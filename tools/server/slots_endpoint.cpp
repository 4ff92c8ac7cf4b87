// GET /slots and POST /slots/{id}?action=save|restore|erase (llama-server's slot persistence):
// a slot's kept sequence state (Scheduler::Options::keep_slot_states) written to or read from a
// file named in the body, confined to --slot-save-path.
#include <cctype>
#include <filesystem>

#include "api_error.h"
#include "endpoints.h"
#include "openai_response.h"

namespace k3::server {

namespace {

/// A plain file name: [A-Za-z0-9._-]{1,200}, not starting with '.', so that it cannot leave the
/// --slot-save-path directory.
std::string checked_filename(const Json& body) {
  if (!body.contains("filename") || !body["filename"].is_string())
    throw bad_request("filename", "filename: required (a file name inside --slot-save-path)");
  const std::string f = body["filename"].get<std::string>();
  bool ok = !f.empty() && f.size() <= 200 && f[0] != '.';
  for (char c : f) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-');
  if (!ok)
    throw bad_request("filename",
                      "filename: expected a plain file name of letters, digits, '.', '_' or '-' "
                      "(no directories, not starting with '.'), found \"" +
                          f + "\"");
  return f;
}

}  // namespace

void handle_slots_list(const ServeContext& ctx, const httplib::Request&, httplib::Response& res) {
  Json arr = Json::array();
  const auto slots = ctx.scheduler->slot_summary();
  for (size_t i = 0; i < slots.size(); ++i)
    arr.push_back(
        {{"id", i}, {"is_processing", slots[i].first}, {"n_ctx", ctx.n_ctx}, {"n_kept_tokens", slots[i].second}});
  send_json(res, arr);
}

void handle_slot_action(const ServeContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (ctx.slot_save_path.empty())
    throw ApiError(501, "slot save/restore is off: start the server with --slot-save-path DIR", "",
                   "NotImplementedError");
  int64_t id = -1;
  try {
    id = std::stoll(req.matches[1].str());
  } catch (const std::exception&) {
    throw bad_request("id_slot", "id_slot: expected a slot number");
  }
  if (id < 0 || id >= ctx.scheduler->options().n_parallel)
    throw bad_request("id_slot", "id_slot: expected 0.." + std::to_string(ctx.scheduler->options().n_parallel - 1) +
                                     ", found " + std::to_string(id));
  const std::string action = req.get_param_value("action");
  try {
    if (action == "erase") {
      const auto r = ctx.scheduler->erase_slot(id);
      send_json(res, Json{{"id_slot", id}, {"n_erased", r.n_tokens}});
      return;
    }
    if (action != "save" && action != "restore")
      throw bad_request("action", "action: expected save, restore or erase, found \"" + action + "\"");
    const std::string name = checked_filename(req.body.empty() ? Json::object() : parse_body(req.body));
    const std::filesystem::path file = std::filesystem::path(ctx.slot_save_path) / name;
    if (action == "save") {
      const auto r = ctx.scheduler->save_slot(id, file, ctx.fingerprint);
      send_json(res, Json{{"id_slot", id},
                          {"filename", name},
                          {"n_saved", r.n_tokens},
                          {"n_written", r.bytes},
                          {"timings", {{"save_ms", r.ms}}}});
    } else {
      std::error_code ec;
      if (!std::filesystem::exists(file, ec))
        throw ApiError(404, "no saved slot file \"" + name + "\" in --slot-save-path", "filename");
      const auto r = ctx.scheduler->restore_slot(id, file, ctx.fingerprint);
      send_json(res, Json{{"id_slot", id},
                          {"filename", name},
                          {"n_restored", r.n_tokens},
                          {"n_read", r.bytes},
                          {"timings", {{"restore_ms", r.ms}}}});
    }
  } catch (const k3::Error& e) {  // a foreign / corrupt file, an empty or busy slot
    throw bad_request(action == "erase" ? "id_slot" : "filename", e.what());
  }
}

}  // namespace k3::server
