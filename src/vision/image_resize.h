// Resampling as Pillow's Image.resize(size, BICUBIC) does it, bit for bit (shared/spec/vision.md
// §3.3 and its corrections 1-2; checked against Debian's Pillow 9.4, whose order is the Pillow
// 12.x one: the horizontal pass first).
//
// BICUBIC: Keys' cubic with a = -0.5, its support widened by in/out when downscaling
// (antialiasing); weights normalised per output pixel; 8-bit images use weights rounded to
// 22-bit fixed point, accumulate from 2^21, shift right by 22 and clip to [0, 255] after each pass;
// the horizontal pass writes a uint8 intermediate that the vertical pass reads. Each pass runs only
// when its axis changes size. 32-bit integer images (mode I) use the double weights and round
// half away from zero after each pass.
// NEAREST (modes P and 1, whatever filter is asked for): output index i reads source index
// trunc(s_i) with s_0 = in / out / 2, s_{i+1} = s_i + in / out, accumulated in double.
// RGBA and LA are premultiplied by alpha before the resize and un-premultiplied after it.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "vision/image_decode.h"

namespace k3::vision {

/// Pillow 13's pass order: vertical first when (h0 - h1) > 0 and (h0 - h1) > 2 (w0 - w1).
bool pillow13_vertical_first(int64_t w0, int64_t h0, int64_t w1, int64_t h1);

/// BICUBIC of uint8 [h0, w0, channels] (channels interleaved, each resampled alone) to
/// uint8 [h1, w1, channels]. Sizes >= 1. Horizontal pass first; with kPillow13, the order of
/// pillow13_vertical_first.
std::vector<uint8_t> resize_bicubic_u8(std::span<const uint8_t> in, int64_t w0, int64_t h0, int channels, int64_t w1,
                                       int64_t h1, PillowCompat pillow = PillowCompat::kPillow12);
/// BICUBIC of int32 [h0, w0] to int32 [h1, w1] (Pillow's 32-bit path: double weights).
std::vector<int32_t> resize_bicubic_i32(std::span<const int32_t> in, int64_t w0, int64_t h0, int64_t w1, int64_t h1,
                                        PillowCompat pillow = PillowCompat::kPillow12);
/// NEAREST of uint8 [h0, w0, channels] to uint8 [h1, w1, channels].
std::vector<uint8_t> resize_nearest_u8(std::span<const uint8_t> in, int64_t w0, int64_t h0, int channels, int64_t w1,
                                       int64_t h1);

/// Image.resize((w1, h1), BICUBIC) of a decoded image in its mode: a copy when the size is
/// unchanged; NEAREST for P and 1 (palette, transparency key kept); premultiplied BICUBIC for
/// RGBA and LA; BICUBIC otherwise.
DecodedImage resize_image(const DecodedImage& im, int64_t w1, int64_t h1,
                          PillowCompat pillow = PillowCompat::kPillow12);

}  // namespace k3::vision
