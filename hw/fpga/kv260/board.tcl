# Kria KV260 and KR260 (AMD): the K26 SOM's xck26 of the kv260 preset, on its carrier board (board_connections).
# The board files: Xilinx's board store (XHub in Vivado, https://github.com/Xilinx/XilinxBoardStore).
#   make -C hw/fpga/kv260                    # the KV260; BOARD=kr260 for the KR260
set BOARDS {
  kv260 {
    board_part xilinx.com:kv260_som:part0:1.4
    connections {som240_1_connector xilinx.com:kv260_carrier:som240_1_connector:1.3}
  }
  kr260 {
    board_part xilinx.com:kr260_som:part0:1.1
    connections {som240_1_connector xilinx.com:kr260_carrier:som240_1_connector:1.0 som240_2_connector xilinx.com:kr260_carrier:som240_2_connector:1.0}
  }
}
