#pragma once
// Where `plexus-ae compress` and `decompress` write, decided and checked
// before any model is loaded or any image coded, so that a mistake in -o
// costs nothing and leaves nothing behind.
#include <string>
#include <vector>

namespace plexus::ae {

// The two commands' naming rules.
enum class CodecOutput {
  compressed,  // compress: .pxae files
  image,       // decompress: PNG images
};

// The output path of each input (same order):
//   no -o:  next to the input; compress replaces the extension with .pxae
//           (photo.png -> photo.pxae), decompress with .decoded.png
//           (photo.pxae -> photo.decoded.png), so that it never names the image
//           a file was compressed from;
//   -o ending in '/' or naming an existing folder: in that folder, the
//           input's file name with its extension replaced (x.png -> DIR/x.pxae,
//           x.pxae -> DIR/x.png);
//   other -o: that file, for one input only (decompress: it must end in .png;
//           compress: it must not end in .png, .jpg or .jpeg).
// ConfigError, before anything is created, for several inputs with a file -o,
// a decompress -o not ending in .png, a compress -o named as an image, or two
// inputs given the same output.
std::vector<std::string> plan_outputs(const std::vector<std::string>& inputs, const std::string& out, CodecOutput kind);

// Refuses (ConfigError, IoError with the system's reason) each output that
// cannot be written, before any work: it is the input itself, a folder, an
// existing file without `overwrite` (a default name of decompress is never
// replaced on a hint: the message says to choose another with -o), or its
// folder is missing and cannot be created, is not a folder, or is not writable.
// `default_names`: no -o was given.
void check_outputs(const std::vector<std::string>& inputs, const std::vector<std::string>& outputs, CodecOutput kind,
                   bool default_names, bool overwrite);

// Refuses a folder among the inputs, saying how to give the files in it
// ("'DIR' is a folder; to compress the images in it, give them: DIR/*.png").
void check_inputs_are_files(const std::vector<std::string>& inputs, CodecOutput kind);

// Creates the missing parent folders of `output`; IoError saying why not.
// Called for every output once check_outputs passed (so that a refused
// command creates nothing, and a folder the system will not create is
// reported before any work), and again before each write.
void create_parent_folders(const std::string& output);

// The parent folders a batch of compress or decompress creates for its
// outputs: created before the work, so that a folder the system will not
// create is reported first, and removed again at the end where they are still
// empty, so that a batch whose every file failed leaves no empty folders.
class OutputFolders {
 public:
  OutputFolders() = default;
  OutputFolders(const OutputFolders&) = delete;
  OutputFolders& operator=(const OutputFolders&) = delete;
  ~OutputFolders();
  // create_parent_folders(output), remembering the folders that it created.
  void create_parents(const std::string& output);

 private:
  std::vector<std::string> created_;  // in the order created: a folder before the folders inside it
};

}  // namespace plexus::ae
