# PYNQ-Z2 (TUL): xc7z020clg400-1. The board files: https://www.tulembedded.com/FPGA/ProductsPYNQ-Z2.html
set BOARD pynq-z2
set PART xc7z020clg400-1
set BOARD_PART tul.com.tw:pynq-z2:part0:1.0
