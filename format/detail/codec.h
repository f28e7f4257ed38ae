// Section encoding helpers: the xxh64 checksum (seed 0) over stored bytes, a hashing sink, a
// zstd sink that produces exactly one frame with its content size, and frame decoding that checks
// the frame against the section table (one frame, Frame_Content_Size == Raw_Size, no trailing
// bytes) before trusting it, growing its buffer only as real output appears.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "format/format.h"

namespace kvzip::format::detail {

uint64_t xxh64(const void* data, size_t size);

class HashSink final : public Sink {
 public:
  HashSink();
  ~HashSink() override;
  void write(const void* data, size_t size) override;
  uint64_t digest() const;
  uint64_t size() const { return size_; }

 private:
  struct State;
  std::unique_ptr<State> state_;
  uint64_t size_ = 0;
};

class ZstdSink final : public Sink {
 public:
  ZstdSink(int level, uint64_t raw_size);  // raw_size is pledged into the frame header
  ~ZstdSink() override;
  void write(const void* data, size_t size) override;
  std::vector<uint8_t> finish();  // the complete frame

 private:
  void* cctx_;
  std::vector<uint8_t> out_;
};

// Decodes a stored zstd section of `stored` bytes to exactly `raw` bytes. `where` names the
// section in errors (Errc::corrupt).
std::vector<uint8_t> zstd_decode(const uint8_t* src, uint64_t stored, uint64_t raw,
                                 const std::string& where);
void zstd_decode_into(const uint8_t* src, uint64_t stored, uint8_t* dst, uint64_t raw,
                      const std::string& where);

}  // namespace kvzip::format::detail
