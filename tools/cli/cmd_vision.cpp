// `k3 vision`: image-token embeddings from the vision tower and projector (shared spec vision.md
// §4-§5): preprocessed patches in, the projector output [n_tokens, hidden] float32 out (--out),
// named intermediates with --dump DIR (vision/vision_tower.h lists them). Images come as
// --patches FILE.npy (float32 [h·w, 588] or [h·w, 3, 14, 14], spec §3.4 order, e.g. from
// `k3 image-info --out`) with --grid H,W, or as --image FILE (PNG, JPEG or WebP, preprocessed as
// K3's processor does with the checkpoint's preprocessor_config.json, vision/image_preprocess.h);
// all of them form one batch (the --patches images first). A text-only checkpoint
// is refused. Exact fp32 by default (the fp64 reference's 1e-5 contract); --numerics selects
// another mode.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "core/error.h"
#include "exec_flags.h"
#include "flag_checks.h"
#include "io/checkpoint.h"
#include "io/npy_reader.h"
#include "model/dump.h"
#include "ranks.h"
#include "vision/image_patches.h"
#include "vision/image_preprocess.h"
#include "vision/vision_tower.h"

namespace {

struct Options {
  std::string model, out, dump;
  std::vector<std::string> patches, grids, image_files;
  int threads = 0;
  k3cli::InputLimit input_limit;
  k3cli::NumericsFlag numerics;
};

/// "H,W" -> (H, W). Errors name --grid and the value.
std::pair<int64_t, int64_t> parse_grid(const std::string& s) {
  const size_t comma = s.find(',');
  auto num = [&](const std::string& t) -> int64_t {
    size_t pos = 0;
    long long v = -1;
    try {
      v = std::stoll(t, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (t.empty() || pos != t.size() || v < 1 || v > (1 << 20))
      throw k3::Error("--grid: '" + s + "' is not H,W (two positive patch counts, e.g. 32,44)");
    return v;
  };
  if (comma == std::string::npos) throw k3::Error("--grid: '" + s + "' is not H,W (e.g. 32,44)");
  return {num(s.substr(0, comma)), num(s.substr(comma + 1))};
}

/// One image from --patches FILE and --grid H,W.
k3::vision::ImagePatches load_patches(const std::string& file, const std::string& grid,
                                      const k3cli::InputLimit& limit) {
  const auto [h, w] = parse_grid(grid);
  k3::NpyArray a = k3::read_npy(file, "--patches", limit.limits());
  const bool flat = a.shape.size() == 2 && a.shape[1] == k3::vision::kPatchValues;
  const bool cube = a.shape.size() == 4 && a.shape[1] == 3 && a.shape[2] == k3::vision::kPatchSize &&
                    a.shape[3] == k3::vision::kPatchSize;
  std::string shape = "[";
  for (size_t i = 0; i < a.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(a.shape[i]);
  shape += "]";
  if (!flat && !cube)
    throw k3::Error("--patches '" + file + "': shape " + shape + ", expected [n, 588] or [n, 3, 14, 14]");
  if (a.shape[0] != h * w)
    throw k3::Error("--patches '" + file + "': " + std::to_string(a.shape[0]) + " patches, but --grid " + grid +
                    " needs " + std::to_string(h * w));
  k3::vision::ImagePatches im;
  im.grid_h = h;
  im.grid_w = w;
  im.patches = std::move(a.data);
  im.name = file;
  return im;
}

/// Encodes `images` with the tower of `ck`, prints the summary and writes --out / --dump. The
/// one entry point of the command for any image source (patch files here; decoded images too).
void encode_and_write(const k3::vision::VisionTower& tower, const std::vector<k3::vision::ImagePatches>& images,
                      const Options& o) {
  std::unique_ptr<k3::DumpSink> sink;
  if (!o.dump.empty()) sink = std::make_unique<k3::DumpSink>(o.dump);
  k3::vision::VisionOptions vo;
  vo.dump = sink.get();
  const auto t0 = std::chrono::steady_clock::now();
  const k3::vision::VisionOutput r = tower.encode(images, vo);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t n_tokens = 0, n_patches = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    const auto& im = images[i];
    std::printf("image %zu      %s: grid %lldx%lld, %lld patches, %lld tokens\n", i, im.name.c_str(),
                static_cast<long long>(im.grid_h), static_cast<long long>(im.grid_w),
                static_cast<long long>(im.grid_h * im.grid_w), static_cast<long long>(r.n_tokens[i]));
    n_tokens += r.n_tokens[i];
    n_patches += im.grid_h * im.grid_w;
  }
  const int64_t Dt = tower.config().text_hidden_size;
  std::printf("vision        %zu image(s), %lld patches -> %lld tokens x %lld in %.3f s; workspace %.1f MiB\n",
              images.size(), static_cast<long long>(n_patches), static_cast<long long>(n_tokens),
              static_cast<long long>(Dt), secs, static_cast<double>(r.workspace_bytes) / (1 << 20));
  if (!o.out.empty()) {
    k3::write_npy_f32(o.out, {n_tokens, Dt}, r.embeddings.data());
    std::printf("wrote         %s [%lld, %lld] float32\n", o.out.c_str(), static_cast<long long>(n_tokens),
                static_cast<long long>(Dt));
  }
  if (sink) sink->finish();
}

void run(const Options& o) {
  k3cli::refuse_ranks("k3 vision");
  if (o.patches.empty() && o.image_files.empty())
    throw k3::Error("vision: give the image as --image FILE or as --patches FILE.npy with --grid H,W");
  if (o.patches.size() != o.grids.size())
    throw k3::Error("vision: " + std::to_string(o.patches.size()) + " --patches but " + std::to_string(o.grids.size()) +
                    " --grid (one --grid H,W per --patches file, in the same order)");
  const k3::ExecContext ctx = k3::resolve_exec_config(o.numerics.exec(k3::Numerics::Exact, o.threads));
  const k3::ExecScope scope(ctx);
  auto ck = k3::Checkpoint::open(o.model);
  const k3::vision::VisionTower tower(*ck);  // refuses a text-only checkpoint before any image is read
  std::vector<k3::vision::ImagePatches> images;
  for (size_t i = 0; i < o.patches.size(); ++i) images.push_back(load_patches(o.patches[i], o.grids[i], o.input_limit));
  if (!o.image_files.empty()) {
    const auto cfg = k3::vision::ImagePreprocessConfig::for_model_dir(o.model);
    for (const std::string& f : o.image_files)
      images.push_back(k3::vision::preprocess_image_file(f, cfg, k3::vision::ImageLimits{}));
  }
  encode_and_write(tower, images, o);
}

const k3cli::Registrar kReg(
    "vision", "image-token embeddings of the vision tower + projector for preprocessed patches", [](CLI::App* sub) {
      auto o = std::make_shared<Options>();
      sub->add_option("-m,--model", o->model, "checkpoint directory (with a vision_config tower)")->required();
      sub->add_option("--patches", o->patches,
                      "float32 .npy [h*w, 588] or [h*w, 3, 14, 14] of one image's patches (spec vision.md §3.4); "
                      "repeat for a batch");
      sub->add_option("--grid", o->grids, "the patch grid H,W of the matching --patches (both even)");
      sub->add_option("--image", o->image_files,
                      "PNG, JPEG or WebP file, preprocessed as K3's processor does (spec vision.md §3); "
                      "repeat for a batch");
      sub->add_option("--out", o->out, "write the projector output as .npy float32 [n_tokens, hidden]");
      sub->add_option("--dump", o->dump, "write the named intermediates (.npy + manifest.json) to DIR");
      sub->add_option("-t,--threads", o->threads, "worker threads (0 = all hardware threads)")
          ->capture_default_str()
          ->check(k3cli::IntRange(0, 1 << 20));
      o->input_limit.add_to(sub);
      o->numerics.add_to(sub);
      sub->callback([o] { run(*o); });
    });

}  // namespace
