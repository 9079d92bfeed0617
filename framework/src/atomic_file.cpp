#include "plexus/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "plexus/error.h"

namespace plexus {

namespace {

std::string parent_folder(const std::string& path) {
  std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Writes all of `bytes` to `fd`, retrying short writes; false with errno set.
bool write_all(int fd, const char* bytes, std::size_t size) {
  while (size > 0) {
    ssize_t written = ::write(fd, bytes, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes += written;
    size -= static_cast<std::size_t>(written);
  }
  return true;
}

const char* const kTemporaryMarker = ".tmp-";

}  // namespace

std::string temporary_suffix(int pid) { return kTemporaryMarker + std::to_string(pid); }

AtomicFile::AtomicFile(std::string target, std::string what)
    : target_(std::move(target)), what_(std::move(what)), path_(target_ + temporary_suffix(::getpid())) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create '" + path_ + "'", errno);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(path_.c_str());
}

void AtomicFile::fail(const std::string& action, int error_number) const {
  throw IoError("cannot write " + what_ + " '" + target_ + "': " + action + ": " + std::strerror(error_number));
}

bool AtomicFile::try_write(const void* bytes, std::size_t size) noexcept {
  if (write_error_ != 0) return false;
  if (write_all(fd_, static_cast<const char*>(bytes), size)) return true;
  write_error_ = errno;
  return false;
}

void AtomicFile::write(const void* bytes, std::size_t size) {
  if (!try_write(bytes, size)) fail("writing '" + path_ + "' failed", write_error_);
}

void AtomicFile::check_writes() const {
  if (write_error_ != 0) fail("writing '" + path_ + "' failed", write_error_);
}

void AtomicFile::commit() {
  check_writes();
  if (::fsync(fd_) != 0) fail("fsync of '" + path_ + "' failed", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("closing '" + path_ + "' failed", errno);
  if (::rename(path_.c_str(), target_.c_str()) != 0) fail("renaming '" + path_ + "' over it failed", errno);
  committed_ = true;
  const int folder = ::open(parent_folder(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (folder >= 0) {
    ::fsync(folder);  // best effort: some file systems refuse to fsync a folder
    ::close(folder);
  }
}

void write_file_atomically(const std::string& path, const std::string& contents, const std::string& what) {
  AtomicFile file(path, what);
  file.write(contents.data(), contents.size());
  file.commit();
}

std::vector<std::string> remove_stale_temporary_files(const std::string& folder) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  std::error_code error;
  for (fs::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    const std::size_t marker = name.rfind(kTemporaryMarker);
    if (marker == std::string::npos || marker == 0) continue;
    const std::string digits = name.substr(marker + std::strlen(kTemporaryMarker));
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    // kill(pid, 0) probes without signalling: ESRCH means no such process.
    if (pid == ::getpid() || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code type_error;
    if (!it->is_regular_file(type_error)) continue;
    if (fs::remove(it->path(), type_error)) removed.push_back(it->path().string());
  }
  return removed;
}

}  // namespace plexus
