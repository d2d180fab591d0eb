#include "claw/data/file_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "claw/core/error.h"

namespace claw::data {
namespace {

std::string os_error() { return std::strerror(errno); }

}  // namespace

FileDescriptor open_regular_file(const std::string& path, const char* what) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) fail("{} {} not found", what, path);
    fail("{} {}: cannot open ({})", what, path, os_error());
  }
  FileDescriptor out(fd);
  regular_file_size(out, path, what);  // rejects directories and devices
  return out;
}

uint64_t regular_file_size(const FileDescriptor& fd, const std::string& path, const char* what) {
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) fail("{} {}: cannot stat ({})", what, path, os_error());
  if (!S_ISREG(st.st_mode)) fail("{} {} is not a regular file", what, path);
  return static_cast<uint64_t>(st.st_size);
}

size_t read_some(const FileDescriptor& fd, void* dst, size_t n, const std::string& path, const char* what) {
  char* p = static_cast<char*>(dst);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd.get(), p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("{} {}: read failed ({})", what, path, os_error());
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

FileDescriptor& FileDescriptor::operator=(FileDescriptor&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

int FileDescriptor::release() { return std::exchange(fd_, -1); }

MappedFile::MappedFile(const std::string& path, const char* what) : path_(path) {
  FileDescriptor fd = open_regular_file(path, what);
  size_ = regular_file_size(fd, path, what);
  if (size_ == 0) return;
  // The mapping stays valid after the descriptor closes.
  void* addr = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (addr == MAP_FAILED) fail("{} {}: cannot mmap {} bytes ({})", what, path, size_, os_error());
  addr_ = addr;
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), addr_(std::exchange(o.addr_, nullptr)), size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    unmap();
    path_ = std::move(o.path_);
    addr_ = std::exchange(o.addr_, nullptr);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() { unmap(); }

void MappedFile::unmap() {
  if (addr_ != nullptr) ::munmap(addr_, size_);
  addr_ = nullptr;
  size_ = 0;
}

std::string read_file(const std::string& path, const char* what) {
  FileDescriptor fd = open_regular_file(path, what);
  std::string out(regular_file_size(fd, path, what), '\0');
  if (read_some(fd, out.data(), out.size(), path, what) != out.size())
    fail("{} {}: file shrank while being read", what, path);
  return out;
}

bool path_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

TempFileWriter::TempFileWriter(std::string path) : path_(std::move(path)), temp_path_(path_ + ".tmp.XXXXXX") {
  int fd = ::mkstemp(temp_path_.data());
  if (fd < 0) fail("cannot create a temporary file next to {} ({})", path_, os_error());
  fd_ = FileDescriptor(fd);
  // mkstemp creates 0600; published data files are world-readable like any
  // other output file.
  ::fchmod(fd_.get(), 0644);
  buf_.resize(size_t{1} << 20);
}

TempFileWriter::~TempFileWriter() {
  if (!committed_) ::unlink(temp_path_.c_str());
}

void TempFileWriter::write(const void* data, size_t n) {
  CLAW_CHECK(fd_.get() >= 0, "write to {} after close", path_);
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    if (used_ == buf_.size()) flush();
    size_t k = std::min(n, buf_.size() - used_);
    std::memcpy(buf_.data() + used_, p, k);
    used_ += k;
    p += k;
    n -= k;
    written_ += k;
  }
}

void TempFileWriter::flush() {
  size_t done = 0;
  while (done < used_) {
    ssize_t r = ::write(fd_.get(), buf_.data() + done, used_ - done);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) fail("writing {} (temporary {}) failed ({})", path_, temp_path_, os_error());
    done += static_cast<size_t>(r);
  }
  used_ = 0;
}

void TempFileWriter::close() {
  if (fd_.get() < 0) return;
  flush();
  if (::fsync(fd_.get()) != 0) fail("writing {} (temporary {}): fsync failed ({})", path_, temp_path_, os_error());
  int fd = fd_.release();
  if (::close(fd) != 0) fail("writing {} (temporary {}): close failed ({})", path_, temp_path_, os_error());
}

void TempFileWriter::commit() {
  CLAW_CHECK(!committed_, "{} committed twice", path_);
  close();
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0)
    fail("cannot rename {} to {} ({})", temp_path_, path_, os_error());
  committed_ = true;
}

}  // namespace claw::data
