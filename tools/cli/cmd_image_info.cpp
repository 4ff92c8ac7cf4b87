// `k3 image-info --image FILE [--out patches.npy]`: one image through the K3 image preprocessing
// (shared/spec/vision.md §3): prints the format, the decoded mode, the size before and after the
// resize, the patch grid and the image-token count; --out writes the patches as float32
// [n_patches, 588] .npy (what the vision tower takes).
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "command.h"
#include "flag_checks.h"
#include "core/error.h"
#include "model/dump.h"
#include "ranks.h"
#include "vision/image_preprocess.h"

namespace {

struct ImageInfoOpts {
  std::string image, out, config;
  int pillow = 12;
  int64_t max_bytes = static_cast<int64_t>(k3::vision::ImageLimits{}.max_bytes);
  int64_t max_pixels = static_cast<int64_t>(k3::vision::ImageLimits{}.max_source_pixels);
};

void run_image_info(const ImageInfoOpts& o) {
  k3cli::refuse_ranks("k3 image-info");
  namespace kv = k3::vision;
  kv::ImagePreprocessConfig cfg =
      o.config.empty() ? kv::ImagePreprocessConfig{} : kv::ImagePreprocessConfig::load(o.config);
  cfg.pillow = o.pillow == 13 ? kv::PillowCompat::kPillow13 : kv::PillowCompat::kPillow12;
  kv::ImageLimits limits;
  limits.max_bytes = static_cast<uint64_t>(o.max_bytes);
  limits.max_source_pixels = static_cast<uint64_t>(o.max_pixels);
  kv::ImageInfo info;
  const auto t0 = std::chrono::steady_clock::now();
  const kv::ImagePatches p = kv::preprocess_image_file(o.image, cfg, limits, &info);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const kv::TargetSize& t = info.size;
  std::printf("image: %s\n", p.name.c_str());
  std::printf("format: %s\n", kv::format_name(info.format));
  std::printf("mode: %s\n", kv::mode_name(info.mode));
  std::printf("size: %lldx%lld\n", static_cast<long long>(t.width0), static_cast<long long>(t.height0));
  std::printf("resized: %lldx%lld%s\n", static_cast<long long>(t.width), static_cast<long long>(t.height),
              t.resized() ? "" : " (no resize)");
  std::printf("padded: %lldx%lld (pad right %lld, bottom %lld)\n", static_cast<long long>(t.width + t.pad_w),
              static_cast<long long>(t.height + t.pad_h), static_cast<long long>(t.pad_w),
              static_cast<long long>(t.pad_h));
  std::printf("grid: (1, %lld, %lld)\n", static_cast<long long>(p.grid_h), static_cast<long long>(p.grid_w));
  std::printf("patches: %lld\n", static_cast<long long>(p.grid_h * p.grid_w));
  std::printf("tokens: %lld\n", static_cast<long long>(t.n_tokens(cfg.merge_kernel_size)));
  std::printf("time: %.1f ms\n", ms);
  if (!o.out.empty()) {
    k3::write_npy_f32(o.out, {p.grid_h * p.grid_w, k3::vision::kPatchValues}, p.patches.data());
    std::printf("wrote %s: float32 [%lld, %lld]\n", o.out.c_str(), static_cast<long long>(p.grid_h * p.grid_w),
                static_cast<long long>(k3::vision::kPatchValues));
  }
}

const k3cli::Registrar kImageInfo(
    "image-info", "one image through the K3 preprocessing: size, resize, patch grid, tokens (--out: patches .npy)",
    [](CLI::App* sub) {
      auto o = std::make_shared<ImageInfoOpts>();
      sub->add_option("--image", o->image, "PNG, JPEG or WebP file (the format is read from its bytes)")->required();
      sub->add_option("--out", o->out, "write the patches as float32 [n_patches, 588] .npy");
      sub->add_option("--config", o->config,
                      "preprocessor_config.json (default: K3's shipped values, spec vision.md §1.2)");
      sub->add_option("--pillow", o->pillow,
                      "match Pillow 12 (and older: horizontal pass first) or 13 (vertical first for tall shrinks)")
          ->capture_default_str()
          ->check(CLI::IsMember({12, 13}));
      sub->add_option("--max-image-bytes", o->max_bytes, "refuse files larger than this (bytes)")
          ->capture_default_str()
          ->check(k3cli::IntRange(1, int64_t{1} << 40));
      sub->add_option("--max-image-pixels", o->max_pixels, "refuse images with more source pixels (W x H)")
          ->capture_default_str()
          ->check(k3cli::IntRange(1, int64_t{1} << 40));
      sub->callback([o] { run_image_info(*o); });
    });

}  // namespace
