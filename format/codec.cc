// xxh64 and zstd plumbing for sections (see detail/codec.h). zstd frames are checked against the
// section table before decoding, so a forged Raw_Size cannot make the reader allocate memory that
// the frame does not actually produce.
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>

#include "format/detail/codec.h"

namespace kvzip::format::detail {

uint64_t xxh64(const void* data, size_t size) { return XXH64(data, size, 0); }

struct HashSink::State {
  XXH64_state_t* s = XXH64_createState();
  ~State() { XXH64_freeState(s); }
};

HashSink::HashSink() : state_(std::make_unique<State>()) {
  if (!state_->s) throw Error(Errc::out_of_memory, "xxhash: cannot create a hash state");
  XXH64_reset(state_->s, 0);
}
HashSink::~HashSink() = default;
void HashSink::write(const void* data, size_t size) {
  XXH64_update(state_->s, data, size);
  size_ += size;
}
uint64_t HashSink::digest() const { return XXH64_digest(state_->s); }

static void zstd_check(size_t rc, const char* what) {
  if (ZSTD_isError(rc))
    throw Error(Errc::internal, std::string("zstd ") + what + ": " + ZSTD_getErrorName(rc));
}

ZstdSink::ZstdSink(int level, uint64_t raw_size) : cctx_(ZSTD_createCCtx()) {
  if (!cctx_) throw Error(Errc::out_of_memory, "zstd: cannot create a compression context");
  auto* c = static_cast<ZSTD_CCtx*>(cctx_);
  zstd_check(ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level), "level");
  zstd_check(ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, 1), "content size flag");
  zstd_check(ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 0), "checksum flag");
  zstd_check(ZSTD_CCtx_setPledgedSrcSize(c, raw_size), "pledged size");
  out_.reserve(static_cast<size_t>(std::min<uint64_t>(ZSTD_compressBound(raw_size), 1u << 20)));
}

ZstdSink::~ZstdSink() { ZSTD_freeCCtx(static_cast<ZSTD_CCtx*>(cctx_)); }

void ZstdSink::write(const void* data, size_t size) {
  auto* c = static_cast<ZSTD_CCtx*>(cctx_);
  ZSTD_inBuffer in{data, size, 0};
  uint8_t buf[1 << 16];
  while (in.pos < in.size) {
    ZSTD_outBuffer out{buf, sizeof buf, 0};
    zstd_check(ZSTD_compressStream2(c, &out, &in, ZSTD_e_continue), "compress");
    out_.insert(out_.end(), buf, buf + out.pos);
  }
}

std::vector<uint8_t> ZstdSink::finish() {
  auto* c = static_cast<ZSTD_CCtx*>(cctx_);
  uint8_t buf[1 << 16];
  size_t left;
  do {
    ZSTD_inBuffer in{nullptr, 0, 0};
    ZSTD_outBuffer out{buf, sizeof buf, 0};
    left = ZSTD_compressStream2(c, &out, &in, ZSTD_e_end);
    zstd_check(left, "end frame");
    out_.insert(out_.end(), buf, buf + out.pos);
  } while (left != 0);
  return std::move(out_);
}

// Frame checks shared by both decoders.
static void check_frame(const uint8_t* src, uint64_t stored, uint64_t raw,
                        const std::string& where) {
  unsigned long long content = ZSTD_getFrameContentSize(src, stored);
  if (content == ZSTD_CONTENTSIZE_ERROR)
    throw Error(Errc::corrupt, where + ": stored bytes are not a zstd frame (Codec 1 = zstd)");
  if (content == ZSTD_CONTENTSIZE_UNKNOWN)
    throw Error(Errc::corrupt, where + ": zstd frame lacks Frame_Content_Size, which v1 requires");
  if (content != raw)
    throw Error(Errc::corrupt, where + ": zstd Frame_Content_Size " + std::to_string(content) +
                                   " differs from Raw_Size " + std::to_string(raw));
  size_t frame = ZSTD_findFrameCompressedSize(src, stored);
  if (ZSTD_isError(frame))
    throw Error(Errc::corrupt, where + ": zstd frame is damaged: " + ZSTD_getErrorName(frame));
  if (frame != stored)
    throw Error(Errc::corrupt, where + ": zstd frame is " + std::to_string(frame) +
                                   " bytes but Stored_Size is " + std::to_string(stored) +
                                   " (exactly one frame, no trailing bytes)");
}

namespace {
struct DCtx {
  ZSTD_DCtx* d = ZSTD_createDCtx();
  ~DCtx() { ZSTD_freeDCtx(d); }
};
}  // namespace

std::vector<uint8_t> zstd_decode(const uint8_t* src, uint64_t stored, uint64_t raw,
                                 const std::string& where) {
  check_frame(src, stored, raw, where);
  DCtx ctx;
  if (!ctx.d) throw Error(Errc::out_of_memory, "zstd: cannot create a decompression context");
  std::vector<uint8_t> out;
  ZSTD_inBuffer in{src, static_cast<size_t>(stored), 0};
  size_t produced = 0;
  for (;;) {
    // Grow by doubling, capped at Raw_Size: memory follows the bytes the frame really yields.
    if (produced == out.size() && out.size() < raw)
      out.resize(static_cast<size_t>(
          std::min<uint64_t>(raw, std::max<uint64_t>(out.size() * 2, 1 << 16))));
    size_t in_before = in.pos;
    ZSTD_outBuffer ob{out.data(), out.size(), produced};
    size_t rc = ZSTD_decompressStream(ctx.d, &ob, &in);
    if (ZSTD_isError(rc))
      throw Error(Errc::corrupt, where + ": zstd data is damaged: " + ZSTD_getErrorName(rc));
    bool progress = ob.pos != produced || in.pos != in_before;
    produced = ob.pos;
    if (rc == 0 || !progress) break;  // frame complete, or it wants more than Raw_Size / input
  }
  if (produced != raw || in.pos != in.size)
    throw Error(Errc::corrupt, where + ": zstd frame decoded to " + std::to_string(produced) +
                                   " bytes, Raw_Size says " + std::to_string(raw));
  return out;
}

void zstd_decode_into(const uint8_t* src, uint64_t stored, uint8_t* dst, uint64_t raw,
                      const std::string& where) {
  check_frame(src, stored, raw, where);
  DCtx ctx;
  if (!ctx.d) throw Error(Errc::out_of_memory, "zstd: cannot create a decompression context");
  size_t rc = ZSTD_decompressDCtx(ctx.d, dst, raw, src, stored);
  if (ZSTD_isError(rc))
    throw Error(Errc::corrupt, where + ": zstd data is damaged: " + ZSTD_getErrorName(rc));
  if (rc != raw)
    throw Error(Errc::corrupt, where + ": zstd frame decoded to " + std::to_string(rc) +
                                   " bytes, Raw_Size says " + std::to_string(raw));
}

}  // namespace kvzip::format::detail
