# PYNQ-Z1 (Digilent): the xc7z020 of the pynq-z2 preset. The board files: https://github.com/Digilent/vivado-boards
set BOARDS {
  pynq-z1 {board_part www.digilentinc.com:pynq-z1:part0:1.0}
}
