// NumPy .npy files (format version 1.0) for claw's cached dataset indices,
// so they can be inspected with numpy.load:
//   "\x93NUMPY" 1 0, u16 little-endian header length, an ASCII dict
//   {'descr': '<i8', 'fortran_order': False, 'shape': (n,), } padded with
//   spaces and '\n' so the data starts at a multiple of 64 bytes, then the
//   raw little-endian, C-order array.
// The integer dtypes the indices use, and float64 (DPO's reference
// log-probabilities).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace claw::data {

// Writes a 1-D (cols == 0) or 2-D [rows, cols] array; temp file + rename.
template <typename T>
void write_npy(const std::string& path, const std::vector<T>& values, int64_t cols = 0);

// Reads an array written by write_npy (or numpy.save) of exactly this dtype
// and rank; claw::Error naming the file otherwise. For 2-D arrays `cols`
// receives the column count.
template <typename T>
std::vector<T> read_npy(const std::string& path, int64_t* cols = nullptr);

}  // namespace claw::data
