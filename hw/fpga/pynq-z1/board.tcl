# PYNQ-Z1 (Digilent): xc7z020clg400-1. The board files: https://github.com/Digilent/vivado-boards
set BOARD pynq-z1
set PART xc7z020clg400-1
set BOARD_PART www.digilentinc.com:pynq-z1:part0:1.0
