# ZCU104 (AMD): the xczu7ev of the zcu104 preset. The board files ship with Vivado.
set BOARDS {
  zcu104 {board_part xilinx.com:zcu104:part0:1.1}
}
