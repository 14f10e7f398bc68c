// A tar as Python's tarfile reads it (torch.load tries tarfile.open(mode='r:') on every file that is
// no zip before it reads the file as pickles: torch < 0.4's layout, members `storages`, `tensors` and
// `pickle`, each holding pickles). tarfile accepts a first header by its checksum alone (the ustar
// magic is never looked at), so a tar can also be a pickle from its first byte.
//
// Header (512 bytes): 0 name[100] 100 mode[8] 108 uid[8] 116 gid[8] 124 size[12] 136 mtime[12]
// 148 chksum[8] 156 type 157 linkname[100] 257 magic[6] 263 version[2] 265 uname[32] 297 gname[32]
// 329 devmajor[8] 337 devminor[8] 345 prefix[155]. Numbers are octal text (or base-256 when the first
// byte is 0x80 or 0xff); the checksum is the sum of the header's bytes with its own field as spaces,
// as unsigned or as signed bytes. GNU 'L'/'K' members carry the next member's long name or link name;
// pax 'x' (and 'g', for every later member) records override path, linkpath and size.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/bytes.hpp"

namespace ckpt {

struct TarMember {
    std::string name;
    char type = '0';       // '0'/'\0'/'7' regular, '1' hard link, '2' symlink, '3' '4' '6' devices and FIFOs, '5' directory, 'S' sparse
    std::string link;      // what a link points to
    uint64_t header = 0;   // where its header is
    uint64_t data = 0, size = 0;
    bool regular() const { return type == '0' || type == '\0' || type == '7'; }
};

struct TarReading {
    bool accepted = false;  // tarfile.open takes the file: its first header is a header
    std::string problem;    // why it stopped reading members ("" when it reached the end blocks)
    std::vector<TarMember> members;
};

TarReading read_tar(ByteView file);
// The member tarfile's getmember(name) returns: the last of that name, or SIZE_MAX.
size_t tar_find(const TarReading& t, std::string_view name);

}  // namespace ckpt
