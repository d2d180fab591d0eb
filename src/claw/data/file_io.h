// Files for the data layer: RAII owners of the OS handles it uses, a
// whole-file read, and a writer that publishes a file only when complete.
//
// Every failure is a claw::Error that names the path and the OS reason.
//
// Thread-safety: a MappedFile may be read from any number of threads; a
// TempFileWriter belongs to one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace claw::data {

// An open file descriptor, closed on destruction.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(FileDescriptor&& o) noexcept : fd_(o.release()) {}
  FileDescriptor& operator=(FileDescriptor&& o) noexcept;
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor();

  int get() const { return fd_; }
  int release();

 private:
  int fd_ = -1;
};

// A whole file mapped read-only. The mapping is private to this object and
// unmapped on destruction; an empty file has an empty span (mmap refuses
// length 0). `what` names the file's role in error messages, e.g.
// "index file" -> "index file /x/y.idx not found".
class MappedFile {
 public:
  MappedFile(const std::string& path, const char* what);
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(addr_), size_}; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void unmap();

  std::string path_;
  void* addr_ = nullptr;
  size_t size_ = 0;
};

// The contents of a file; `what` as for MappedFile.
std::string read_file(const std::string& path, const char* what);

// Calls fn(line_number, line) for each line of `text` (1-based numbers; the
// '\n' and a trailing '\r' removed; empty lines included, a final empty
// piece after the last '\n' not).
template <typename F>
void for_each_line(std::string_view text, F&& fn) {
  int64_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    fn(++line_no, line);
  }
}

// Opens a regular file for reading; `what` as for MappedFile.
FileDescriptor open_regular_file(const std::string& path, const char* what);
// Size in bytes of the regular file behind fd.
uint64_t regular_file_size(const FileDescriptor& fd, const std::string& path, const char* what);

// Reads up to n bytes (fewer only at the end of the file; 0 at the end),
// retrying interrupted reads.
size_t read_some(const FileDescriptor& fd, void* dst, size_t n, const std::string& path, const char* what);

// True if `path` exists (any file type).
bool path_exists(const std::string& path);

// Writes `path` under a unique temporary name in the same directory
// (path + ".tmp.XXXXXX"). commit() flushes, fsyncs and renames it onto
// `path`, so readers see either the old file, no file, or the complete new
// one — never a prefix. Destroyed before commit(), it removes the temporary.
class TempFileWriter {
 public:
  explicit TempFileWriter(std::string path);
  TempFileWriter(const TempFileWriter&) = delete;
  TempFileWriter& operator=(const TempFileWriter&) = delete;
  ~TempFileWriter();

  void write(const void* data, size_t n);
  // Flushes and closes the temporary (write errors such as a full disk show
  // up here at the latest); commit() calls it if needed.
  void close();
  void commit();

  const std::string& path() const { return path_; }
  // Where the bytes are until commit(); readable (e.g. mapped) after close().
  const std::string& temp_path() const { return temp_path_; }
  uint64_t bytes_written() const { return written_; }

 private:
  void flush();

  std::string path_, temp_path_;
  FileDescriptor fd_;
  std::vector<char> buf_;
  size_t used_ = 0;
  uint64_t written_ = 0;
  bool committed_ = false;
};

}  // namespace claw::data
