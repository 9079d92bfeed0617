#pragma once
// Files written whole or not at all: the bytes go to "<target>.tmp-<pid>"
// in the target's folder, are flushed to disk and checked, and only then
// renamed over the target. A full disk, a read-only folder or a crash never
// leaves a truncated target (the old one, if any, stays); the error names
// the file and the operating system's reason.
#include <cstddef>
#include <string>
#include <vector>

namespace plexus {

class AtomicFile {
 public:
  // Creates the temporary file. `what` names the content in messages
  // ("checkpoint", "PNG"). Throws IoError when it cannot be created.
  AtomicFile(std::string target, std::string what);
  // Removes the temporary file unless commit() succeeded.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends bytes; throws IoError on failure (e.g. a full disk).
  void write(const void* bytes, std::size_t size);
  // As write(), for callers that cannot throw (C callbacks): false on
  // failure, and commit() then throws with the reason.
  bool try_write(const void* bytes, std::size_t size) noexcept;
  // Throws IoError with the system's reason when a try_write() failed.
  void check_writes() const;
  // check_writes, fsync, close, rename over the target, fsync the folder.
  void commit();

  const std::string& temporary_path() const { return path_; }

 private:
  [[noreturn]] void fail(const std::string& action, int error_number) const;
  std::string target_;
  std::string what_;
  std::string path_;
  int fd_ = -1;
  int write_error_ = 0;
  bool committed_ = false;
};

// Writes `contents` to `path` atomically (see AtomicFile).
void write_file_atomically(const std::string& path, const std::string& contents, const std::string& what);

// The suffix AtomicFile appends: "<target>.tmp-<pid>".
std::string temporary_suffix(int pid);

// Removes every "<name>.tmp-<pid>" file directly in `folder` whose process
// <pid> is no longer running: left by a run that was killed mid-write.
// Returns the removed paths. A folder that does not exist holds none.
std::vector<std::string> remove_stale_temporary_files(const std::string& folder);

}  // namespace plexus
