# AUP-ZU3 (Real Digital, 8 GB or 4 GB) and Ultra96-V2 (Avnet): the xczu3eg of the aup-zu3 preset, whose part
# (vdla/parts.py) is the Ultra96-V2's package at its -1 speed grade; the AUP-ZU3 carries another package at -2.
# The board files: Xilinx's board store (XHub in Vivado, https://github.com/Xilinx/XilinxBoardStore).
#   make -C hw/fpga/aup-zu3                  # the AUP-ZU3 8 GB; BOARD=aup-zu3-4gb or BOARD=ultra96v2 for the others
set BOARDS {
  aup-zu3-8gb {board_part realdigital.org:aup-zu3-8gb:part0:1.0 package xczu3eg-sfvc784-2-e}
  aup-zu3-4gb {board_part realdigital.org:aup-zu3-4gb:part0:1.0 package xczu3eg-sfvc784-2-e}
  ultra96v2 {board_part avnet.com:ultra96v2:part0:1.2}
}
