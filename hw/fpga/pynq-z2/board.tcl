# PYNQ-Z2 (TUL): the xc7z020 of the pynq-z2 preset. The board files: https://www.tulembedded.com/FPGA/ProductsPYNQ-Z2.html
set BOARDS {
  pynq-z2 {board_part tul.com.tw:pynq-z2:part0:1.0}
}
