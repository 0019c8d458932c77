// Reads the GNU build-id note of the running executable. See include/kiln/base/build_info.h.
#include <kiln/base/build_info.h>

#include <elf.h>
#include <link.h>

#include <cstdio>
#include <cstring>

namespace kiln {
namespace {

// Walks the PT_NOTE segments of the main program (the first object dl_iterate_phdr reports) and
// returns the NT_GNU_BUILD_ID descriptor as hex.
int find_build_id(dl_phdr_info* info, size_t /*size*/, void* data) {
  auto* out = static_cast<std::string*>(data);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& phdr = info->dlpi_phdr[i];
    if (phdr.p_type != PT_NOTE) continue;
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + phdr.p_vaddr);
    const char* end = p + phdr.p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      ElfW(Nhdr) note;
      std::memcpy(&note, p, sizeof(note));
      const char* name = p + sizeof(note);
      const char* desc = name + ((note.n_namesz + 3) & ~3u);
      const char* next = desc + ((note.n_descsz + 3) & ~3u);
      if (next > end) break;
      if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 &&
          std::memcmp(name, "GNU", 4) == 0) {
        for (size_t k = 0; k < note.n_descsz; ++k) {
          char hex[3];
          std::snprintf(hex, sizeof(hex), "%02x", static_cast<unsigned char>(desc[k]));
          out->append(hex);
        }
        return 1;
      }
      p = next;
    }
  }
  return 1;  // only the main program is of interest: stop after the first object
}

}  // namespace

std::string executable_build_id() {
  std::string id;
  dl_iterate_phdr(find_build_id, &id);
  return id;
}

}  // namespace kiln
