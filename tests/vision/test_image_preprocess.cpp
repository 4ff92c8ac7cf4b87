// The K3 image preprocessing pieces (shared/spec/vision.md §3): the target-size rule against every
// row of the spec §3.5 table, the chessboard, the float32 compositing, the normalisation, the
// patch order, the resize on a case worked by hand, the config parser and the refusals that need
// no encoder. Bit-identity with Pillow on real files: tests/python/test_image_preprocess.py.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "vision/image_config.h"
#include "vision/image_decode.h"
#include "vision/image_fill.h"
#include "vision/image_preprocess.h"
#include "vision/image_resize.h"
#include "vision/image_target_size.h"

namespace kv = k3::vision;

namespace {

struct SizeRow {
  int64_t w0, h0, w1, h1, grid_h, grid_w, tokens;
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const k3::Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<uint8_t> bytes_of(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

}  // namespace

TEST(ImageTargetSize, SpecTableRows) {
  // Spec §3.5, every row: (W0, H0) -> (W1, H1), grid (h, w), tokens.
  const SizeRow rows[] = {
      {448, 448, 448, 448, 32, 32, 256},
      {611, 437, 611, 437, 32, 44, 352},
      {224, 224, 224, 224, 16, 16, 64},
      {1920, 1080, 1920, 1080, 78, 138, 2691},
      {1861, 7041, 1850, 7002, 502, 134, 16817},
      {30, 16, 30, 16, 2, 4, 2},
      {10, 10, 10, 10, 2, 2, 1},
      {28, 28, 28, 28, 2, 2, 1},
      {896, 896, 896, 896, 64, 64, 1024},
      {3584, 3584, 3584, 3584, 256, 256, 16384},
      {5000, 5000, 3585, 3585, 258, 258, 16641},
      {8000, 1000, 7168, 896, 64, 512, 8192},
  };
  const kv::ImagePreprocessConfig cfg;
  for (const SizeRow& r : rows) {
    const kv::TargetSize t = kv::navit_target_size(r.w0, r.h0, cfg, "table");
    SCOPED_TRACE(std::to_string(r.w0) + "x" + std::to_string(r.h0));
    EXPECT_EQ(t.width, r.w1);
    EXPECT_EQ(t.height, r.h1);
    EXPECT_EQ(t.grid_h, r.grid_h);
    EXPECT_EQ(t.grid_w, r.grid_w);
    EXPECT_EQ(t.n_tokens(cfg.merge_kernel_size), r.tokens);
    EXPECT_EQ((t.width + t.pad_w) % 28, 0);
    EXPECT_EQ((t.height + t.pad_h) % 28, 0);
    EXPECT_EQ(t.resized(), r.w0 != r.w1 || r.h0 != r.h1);
  }
  // 611x437 pads 5 columns and 11 rows; 30x16 pads 26 and 12 (spec §3.5).
  const kv::TargetSize a = kv::navit_target_size(611, 437, cfg, "a");
  EXPECT_EQ(a.pad_w, 5);
  EXPECT_EQ(a.pad_h, 11);
  const kv::TargetSize b = kv::navit_target_size(30, 16, cfg, "b");
  EXPECT_EQ(b.pad_w, 26);
  EXPECT_EQ(b.pad_h, 12);
}

TEST(ImageTargetSize, Refusals) {
  const kv::ImagePreprocessConfig cfg;
  EXPECT_NE(error_of([&] { kv::navit_target_size(0, 10, cfg, "z.png"); }).find("image z.png: zero size"),
            std::string::npos);
  kv::ImagePreprocessConfig odd;
  odd.patch_limit_on_one_side = 3;  // 42 px side -> padded to 56 = 4 patches
  const std::string e = error_of([&] { kv::navit_target_size(60, 20, odd, "w.png"); });
  EXPECT_NE(e.find("too many patches per side"), std::string::npos) << e;
  EXPECT_NE(e.find("w.png"), std::string::npos) << e;
}

TEST(ImageFill, ChessboardValues) {
  const kv::ImagePreprocessConfig cfg;
  // Spec §3.1 and the SMG/RTP vectors: (0,0) = 255, (8,0) = 180.
  EXPECT_EQ(kv::chessboard_value(0, 0, cfg), 255);
  EXPECT_EQ(kv::chessboard_value(8, 0, cfg), 180);
  EXPECT_EQ(kv::chessboard_value(0, 8, cfg), 180);
  EXPECT_EQ(kv::chessboard_value(7, 7, cfg), 255);
  EXPECT_EQ(kv::chessboard_value(8, 8, cfg), 255);
  EXPECT_EQ(kv::chessboard_value(15, 3, cfg), 180);
  EXPECT_EQ(kv::chessboard_value(16, 3, cfg), 255);
  kv::ImagePreprocessConfig off = cfg;
  off.chessboard_square_on_top_left = false;
  EXPECT_EQ(kv::chessboard_value(0, 0, off), 180);
  EXPECT_EQ(kv::chessboard_value(8, 0, off), 255);
}

TEST(ImageFill, CompositeIsFloat32WithTruncation) {
  // Reference: the spec's float32 arithmetic, one rounding per operation (volatile stores keep
  // the compiler from fusing), then truncation.
  int differs_from_f64 = 0;
  for (int bg : {255, 180})
    for (int a = 0; a < 256; ++a)
      for (int v = 0; v < 256; ++v) {
        volatile float alpha = static_cast<float>(a) / 255.0f;
        volatile float t1 = alpha * static_cast<float>(v);
        volatile float t2 = (1.0f - alpha) * static_cast<float>(bg);
        volatile float sum = t1 + t2;
        const uint8_t want = static_cast<uint8_t>(sum);
        ASSERT_EQ(kv::composite_over(v, a, bg), want) << "v " << v << " a " << a << " bg " << bg;
        const double al = a / 255.0;
        differs_from_f64 += static_cast<int>(al * v + (1 - al) * bg) != want;
      }
  // The float64 formula lands elsewhere in some cases (spec §3.1 correction 3): the test is sharp.
  EXPECT_GT(differs_from_f64, 0);
  EXPECT_EQ(kv::composite_over(200, 255, 180), 200);
  EXPECT_EQ(kv::composite_over(200, 0, 180), 180);
}

TEST(ImagePreprocess, NormalisationOf128_64_32) {
  const kv::ImagePreprocessConfig cfg;
  const uint8_t v[3] = {128, 64, 32};
  for (int c = 0; c < 3; ++c) {
    const float x = static_cast<float>(v[c] / 255.0);
    const float want = static_cast<float>(static_cast<double>(static_cast<float>(static_cast<double>(x) - 0.5)) * 2.0);
    EXPECT_EQ(kv::normalize_value(v[c], c, cfg), want);
    EXPECT_NEAR(kv::normalize_value(v[c], c, cfg), 2.0 * v[c] / 255.0 - 1.0, 1e-7);  // rtp-llm's vector
  }
  EXPECT_EQ(kv::normalize_value(0, 0, cfg), -1.0f);  // padding
  EXPECT_EQ(kv::normalize_value(255, 2, cfg), 1.0f);
}

TEST(ImagePreprocess, PatchOrderAndPadding) {
  // 30x16 RGB -> padded to 56x28: grid (2, 4); pixel (y, x, c) lands in patch (y/14)*4 + x/14 at
  // c*196 + (y%14)*14 + x%14; padding is -1.
  const kv::ImagePreprocessConfig cfg;
  const kv::TargetSize t = kv::navit_target_size(30, 16, cfg, "p");
  std::vector<uint8_t> rgb(30 * 16 * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>((i * 7) % 251);
  const kv::ImagePatches p = kv::patchify_rgb(rgb, t, cfg, "p");
  ASSERT_EQ(p.grid_h, 2);
  ASSERT_EQ(p.grid_w, 4);
  ASSERT_EQ(p.patches.size(), static_cast<std::size_t>(8 * kv::kPatchValues));
  EXPECT_EQ(p.n_tokens(), 2);
  EXPECT_EQ(p.width, 30);
  EXPECT_EQ(p.height, 16);
  for (int64_t y = 0; y < 28; ++y)
    for (int64_t x = 0; x < 56; ++x)
      for (int c = 0; c < 3; ++c) {
        const std::size_t at =
            static_cast<std::size_t>(((y / 14) * 4 + x / 14) * kv::kPatchValues + c * 196 + (y % 14) * 14 + x % 14);
        const float want = (y < 16 && x < 30) ? kv::normalize_value(rgb[(y * 30 + x) * 3 + c], c, cfg) : -1.0f;
        ASSERT_EQ(p.patches[at], want) << y << " " << x << " " << c;
      }
}

TEST(ImageResize, BicubicWorkedByHand) {
  // 4 -> 2 pixels, scale 2, support 4: weights of output 0 on inputs 0..3 are k(-0.25), k(0.25),
  // k(0.75), k(1.25) = 0.8671875, 0.8671875, 0.2265625, -0.0703125 (sum 1.890625), so output 0 is
  // 255 * 0.15625 / 1.890625 = 21.07 -> 21, and output 1 is 255 - 21.07 -> 234 (Pillow gives the same).
  const std::vector<uint8_t> in = {0, 0, 255, 255};
  EXPECT_EQ(kv::resize_bicubic_u8(in, 4, 1, 1, 2, 1), (std::vector<uint8_t>{21, 234}));
  EXPECT_EQ(kv::resize_bicubic_u8(in, 1, 4, 1, 1, 2), (std::vector<uint8_t>{21, 234}));  // vertical pass alone
  // A constant image stays constant through both passes and every support width.
  const std::vector<uint8_t> flat(37 * 23 * 3, 173);
  for (auto [w1, h1] : {std::pair<int64_t, int64_t>{36, 22}, {5, 3}, {1, 1}, {37, 2}})
    for (uint8_t v : kv::resize_bicubic_u8(flat, 37, 23, 3, w1, h1)) ASSERT_EQ(v, 173);
  // NEAREST: output i reads trunc((i + 0.5) * in / out).
  const std::vector<uint8_t> idx = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(kv::resize_nearest_u8(idx, 10, 1, 1, 3, 1), (std::vector<uint8_t>{1, 5, 8}));
}

TEST(ImageResize, PremultipliedAlphaHidesColourUnderZeroAlpha) {
  // RGBA 4x1: two transparent pixels of pure red next to two opaque blue ones; after the resize
  // the opaque side has no red (spec §3.3 "Colour hidden under alpha = 0 does not bleed").
  kv::DecodedImage im;
  im.mode = kv::ImageMode::kRGBA;
  im.width = 4;
  im.height = 1;
  im.pixels = {255, 0, 0, 0, 255, 0, 0, 0, 0, 0, 255, 255, 0, 0, 255, 255};
  const kv::DecodedImage out = kv::resize_image(im, 2, 1);
  ASSERT_EQ(out.pixels.size(), 8u);
  EXPECT_EQ(out.pixels[4], 0);    // red of the opaque output
  EXPECT_EQ(out.pixels[6], 255);  // blue
  EXPECT_EQ(out.pixels[7], 234);  // alpha as the bicubic of 0, 0, 255, 255
}

TEST(ImageConfig, DefaultsAndParse) {
  const kv::ImagePreprocessConfig d;
  EXPECT_EQ(d.patch_size, 14);
  EXPECT_EQ(d.merge_kernel_size, 2);
  EXPECT_EQ(d.in_patch_limit, 65536);
  EXPECT_EQ(d.patch_limit_on_one_side, 512);
  EXPECT_EQ(d.chessboard_square_size, 8);
  EXPECT_EQ(d.chessboard_gray_value, 180);
  EXPECT_TRUE(d.fill_stage == kv::FillStage::kAfterResize);
  const kv::ImagePreprocessConfig c = kv::ImagePreprocessConfig::parse(
      R"({"auto_map": {}, "media_proc_cfg": {"patch_size": 14, "merge_kernel_size": [2, 2], "in_patch_limit": 100,
          "patch_limit_on_one_side": 20, "fixed_output_tokens": null, "image_mean": [0.4, 0.5, 0.6],
          "image_std": [0.25, 0.5, 1], "sample_fps": 8.0, "transparent_bg_config": {"pattern": "chessboard",
          "chessboard_square_size": 4, "chessboard_square_on_top_left": false, "chessboard_white_value": 250,
          "chessboard_gray_value": 10}, "transparent_bg_fill_stage": "before_resize"}})",
      "cfg.json");
  EXPECT_EQ(c.in_patch_limit, 100);
  EXPECT_EQ(c.patch_limit_on_one_side, 20);
  EXPECT_EQ(c.image_mean[2], 0.6);
  EXPECT_EQ(c.image_std[0], 0.25);
  EXPECT_EQ(c.chessboard_square_size, 4);
  EXPECT_FALSE(c.chessboard_square_on_top_left);
  EXPECT_EQ(c.chessboard_white_value, 250);
  EXPECT_EQ(c.chessboard_gray_value, 10);
  EXPECT_TRUE(c.fill_stage == kv::FillStage::kBeforeResize);
  for (const auto& [text, needle] : std::vector<std::pair<std::string, std::string>>{
           {"[1]", "expected a JSON object"},
           {"{not json", "expected JSON"},
           {R"({"patch_size": 16})", "patch_size"},
           {R"({"in_patch_limit": -1})", "in_patch_limit"},
           {R"({"merge_kernel_size": [2, 3]})", "merge_kernel_size"},
           {R"({"merge_kernel_size": 3})", "merges 2x2 patches, found 3"},
           {R"({"merge_kernel_size": [4, 4]})", "merges 2x2 patches, found 4"},
           {R"({"patch_limit_on_one_side": 513})", "patch_limit_on_one_side"},
           {R"({"image_mean": [0.5, 0.5]})", "image_mean"},
           {R"({"image_std": [0.5, 0.0, 0.5]})", "image_std"},
           {R"({"fixed_output_tokens": 64})", "fixed_output_tokens"},
           {R"({"transparent_bg_config": {"chessboard_gray_value": 300}})", "chessboard_gray_value"},
           {R"({"transparent_bg_fill_stage": "never"})", "transparent_bg_fill_stage"}}) {
    const std::string e = error_of([&] { kv::ImagePreprocessConfig::parse(text, "cfg.json"); });
    EXPECT_NE(e.find("cfg.json"), std::string::npos) << text << " -> " << e;
    EXPECT_NE(e.find(needle), std::string::npos) << text << " -> " << e;
  }
}

TEST(ImageDecode, RefusalsBeforeDecoding) {
  const kv::ImageLimits lim;
  auto err = [&](const std::vector<uint8_t>& b, const kv::ImageLimits& l) {
    return error_of([&] { kv::decode_image(b, "x.img", l); });
  };
  EXPECT_NE(err({}, lim).find("image x.img: empty"), std::string::npos);
  EXPECT_NE(err(bytes_of("GIF89a\x01\x00\x01\x00"), lim).find("unsupported format GIF"), std::string::npos);
  EXPECT_NE(err(bytes_of("BM\x10\x00\x00\x00"), lim).find("unsupported format BMP"), std::string::npos);
  const std::string hex = err(bytes_of("hello"), lim);
  EXPECT_NE(hex.find("68 65 6c 6c 6f"), std::string::npos) << hex;
  kv::ImageLimits tiny;
  tiny.max_bytes = 4;
  EXPECT_NE(err(bytes_of("\x89PNG\r\n\x1a\n"), tiny).find("8 bytes is over the limit of 4 bytes"), std::string::npos);
  // A PNG signature, an IHDR declaring 60000 x 60000 (3.6e9 pixels) and an empty IDAT: refused
  // from the header (libpng reads the chunks up to the first IDAT).
  std::string png("\x89PNG\r\n\x1a\n", 8);
  auto chunk = [&png](const char* type, std::string data) {
    const uint32_t n = static_cast<uint32_t>(data.size());
    for (int s = 24; s >= 0; s -= 8) png.push_back(static_cast<char>((n >> s) & 0xFF));
    const std::string body = std::string(type, 4) + data;
    uint32_t crc = 0xFFFFFFFFu;  // CRC-32 of type + data, so libpng accepts the chunk
    for (unsigned char ch : body) {
      crc ^= ch;
      for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    crc ^= 0xFFFFFFFFu;
    png += body;
    for (int s = 24; s >= 0; s -= 8) png.push_back(static_cast<char>((crc >> s) & 0xFF));
  };
  const unsigned char ihdr[] = {0, 0, 0xEA, 0x60, 0, 0, 0xEA, 0x60, 8, 2, 0, 0, 0};
  chunk("IHDR", std::string(reinterpret_cast<const char*>(ihdr), sizeof ihdr));
  chunk("IDAT", "");
  const std::string bomb = err(bytes_of(png), lim);
  EXPECT_NE(bomb.find("60000x60000 = 3600000000 pixels is over the limit of 51380224"), std::string::npos) << bomb;
  const std::string trunc = err(bytes_of(png.substr(0, 20)), lim);
  EXPECT_NE(trunc.find("corrupt or truncated PNG"), std::string::npos) << trunc;
  EXPECT_NE(err(bytes_of(std::string("\xff\xd8\xff\xe0", 4)), lim).find("corrupt or truncated JPEG"),
            std::string::npos);
  EXPECT_NE(err(bytes_of(std::string("RIFF\x10\0\0\0WEBPVP8 ", 16)), lim).find("WebP"), std::string::npos);
}

TEST(ImageDecode, PaletteWithTransparencyAndLosslessWebp) {
  // 3x2 palette PNG written by Pillow: PLTE red, green, blue, (10, 20, 30); tRNS 255, 128, 0;
  // indices [[0, 1, 2], [3, 0, 1]].
  const std::vector<uint8_t> png = {
      0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00,
      0x00, 0x03, 0x00, 0x00, 0x00, 0x02, 0x02, 0x03, 0x00, 0x00, 0x00, 0xe0, 0x1a, 0x8e, 0x89, 0x00, 0x00, 0x00,
      0x0c, 0x50, 0x4c, 0x54, 0x45, 0xff, 0x00, 0x00, 0x00, 0xff, 0x00, 0x00, 0x00, 0xff, 0x0a, 0x14, 0x1e, 0x22,
      0x88, 0x29, 0x04, 0x00, 0x00, 0x00, 0x03, 0x74, 0x52, 0x4e, 0x53, 0xff, 0x80, 0x00, 0x7f, 0x6d, 0x68, 0x78,
      0x00, 0x00, 0x00, 0x0c, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x90, 0x60, 0x38, 0x02, 0x00, 0x01, 0x10,
      0x00, 0xdd, 0x11, 0xe5, 0x0f, 0x22, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};
  const kv::DecodedImage p = kv::decode_image(png, "p.png", kv::ImageLimits{});
  EXPECT_TRUE(p.format == kv::ImageFormat::kPng);
  EXPECT_STREQ(kv::mode_name(p.mode), "P");
  EXPECT_EQ(p.width, 3);
  EXPECT_EQ(p.height, 2);
  EXPECT_EQ(p.pixels, (std::vector<uint8_t>{0, 1, 2, 3, 0, 1}));
  EXPECT_TRUE(p.has_palette_alpha);
  EXPECT_EQ(p.palette_alpha[0], 255);
  EXPECT_EQ(p.palette_alpha[1], 128);
  EXPECT_EQ(p.palette_alpha[2], 0);
  EXPECT_EQ(p.palette_alpha[3], 255);  // past the tRNS entries: opaque
  EXPECT_EQ(p.palette[3 * 3 + 2], 30);
  EXPECT_EQ(p.palette[3 * 9], 9);  // past the PLTE entries: gray (i, i, i)
  const kv::ImagePreprocessConfig cfg;
  const std::vector<uint8_t> rgb = kv::fill_transparent_to_rgb(p, cfg);
  const uint8_t g = kv::composite_over(255, 128, 255);  // green over the white square
  EXPECT_EQ(rgb, (std::vector<uint8_t>{255, 0, 0, kv::composite_over(0, 128, 255), g, kv::composite_over(0, 128, 255),
                                       255, 255, 255, 10, 20, 30, 255, 0, 0, kv::composite_over(0, 128, 255), g,
                                       kv::composite_over(0, 128, 255)}));

  // 2x2 lossless WebP with alpha (Pillow, exact=True: colour kept under alpha 0).
  const std::vector<uint8_t> webp = {0x52, 0x49, 0x46, 0x46, 0x3c, 0x00, 0x00, 0x00, 0x57, 0x45, 0x42, 0x50, 0x56, 0x50,
                                     0x38, 0x4c, 0x2f, 0x00, 0x00, 0x00, 0x2f, 0x01, 0x40, 0x00, 0x10, 0x1f, 0x20, 0x20,
                                     0x21, 0xca, 0x10, 0xdb, 0x4c, 0x36, 0x4f, 0x40, 0x42, 0xe4, 0x88, 0x6d, 0xde, 0xba,
                                     0x45, 0x20, 0x40, 0x11, 0x7e, 0xd8, 0xe6, 0xb6, 0x37, 0x02, 0x01, 0x82, 0x73, 0xe7,
                                     0x02, 0xf2, 0x9f, 0x9a, 0xda, 0xf0, 0x03, 0x84, 0x88, 0xfe, 0x47, 0x00};
  const kv::DecodedImage w = kv::decode_image(webp, "w.webp", kv::ImageLimits{});
  EXPECT_TRUE(w.format == kv::ImageFormat::kWebp);
  EXPECT_STREQ(kv::mode_name(w.mode), "RGBA");
  EXPECT_EQ(w.pixels, (std::vector<uint8_t>{1, 2, 3, 255, 40, 50, 60, 0, 70, 80, 90, 128, 200, 210, 220, 255}));
  // Truncations of both are refused with the image named.
  for (std::size_t n : {std::size_t{9}, std::size_t{40}, png.size() - 20}) {
    const std::string e = error_of([&] { kv::decode_image(std::span(png.data(), n), "cut.png", kv::ImageLimits{}); });
    EXPECT_NE(e.find("image cut.png: "), std::string::npos) << e;
  }
  for (std::size_t n : {std::size_t{12}, std::size_t{30}, webp.size() - 10}) {
    const std::string e = error_of([&] { kv::decode_image(std::span(webp.data(), n), "cut.webp", kv::ImageLimits{}); });
    EXPECT_NE(e.find("image cut.webp: "), std::string::npos) << e;
  }
}

TEST(ImageConfig, ForModelDir) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "k3_test_image_config_dir";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  EXPECT_EQ(kv::ImagePreprocessConfig::for_model_dir(dir).in_patch_limit, 65536);  // no file: K3's values
  std::ofstream(dir / "preprocessor_config.json") << R"({"media_proc_cfg": {"in_patch_limit": 1000}})";
  EXPECT_EQ(kv::ImagePreprocessConfig::for_model_dir(dir).in_patch_limit, 1000);
  std::ofstream(dir / "preprocessor_config.json") << R"({"media_proc_cfg": {"in_patch_limit": "many"}})";
  const std::string e = error_of([&] { kv::ImagePreprocessConfig::for_model_dir(dir); });
  EXPECT_NE(e.find("preprocessor_config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("in_patch_limit"), std::string::npos) << e;
  std::filesystem::remove_all(dir);
}

TEST(ImageResize, Pillow13PassOrder) {
  // Pillow 13 runs the vertical pass first when the height shrinks by more than twice the width's
  // shrink; the result equals a vertical-only resize followed by a horizontal-only one.
  std::vector<uint8_t> in(31 * 160 * 3);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>((i * 2654435761u) >> 24);
  EXPECT_TRUE(kv::pillow13_vertical_first(31, 160, 10, 56));
  EXPECT_FALSE(kv::pillow13_vertical_first(75, 53, 67, 47));
  EXPECT_FALSE(kv::pillow13_vertical_first(100, 50, 100, 50));
  const auto v13 = kv::resize_bicubic_u8(in, 31, 160, 3, 10, 56, kv::PillowCompat::kPillow13);
  const auto v_then_h = kv::resize_bicubic_u8(kv::resize_bicubic_u8(in, 31, 160, 3, 31, 56), 31, 56, 3, 10, 56);
  const auto h_then_v = kv::resize_bicubic_u8(kv::resize_bicubic_u8(in, 31, 160, 3, 10, 160), 10, 160, 3, 10, 56);
  EXPECT_EQ(v13, v_then_h);
  EXPECT_EQ(kv::resize_bicubic_u8(in, 31, 160, 3, 10, 56), h_then_v);
  EXPECT_NE(v_then_h, h_then_v);  // the orders differ by +-1 level somewhere on this input
  // Where the rule does not fire, both settings agree.
  EXPECT_EQ(kv::resize_bicubic_u8(in, 31, 160, 3, 20, 150, kv::PillowCompat::kPillow13),
            kv::resize_bicubic_u8(in, 31, 160, 3, 20, 150));
  // Palette indices past the PLTE: gray (Pillow <= 12) or black (Pillow 13).
  kv::DecodedImage p;
  p.mode = kv::ImageMode::kP;
  p.width = 2;
  p.height = 1;
  p.pixels = {0, 9};
  p.palette_size = 1;
  for (int i = 0; i < 256; ++i)
    p.palette[3 * i] = p.palette[3 * i + 1] = p.palette[3 * i + 2] = static_cast<uint8_t>(i);
  p.palette[0] = 7;
  kv::ImagePreprocessConfig cfg;
  EXPECT_EQ(kv::fill_transparent_to_rgb(p, cfg), (std::vector<uint8_t>{7, 0, 0, 9, 9, 9}));
  cfg.pillow = kv::PillowCompat::kPillow13;
  EXPECT_EQ(kv::fill_transparent_to_rgb(p, cfg), (std::vector<uint8_t>{7, 0, 0, 0, 0, 0}));
}
