# Predicted against measured step time from validate.sh rows with run, placement and collective columns
# (validate-rotation.csv: measured in column 7, predicted in 8, predicted without turns in 12):
# gnuplot -e "csv='bench/scaling/validate-rotation.csv'; out='docs/scaling-validation.png'" bench/scaling/plot_validation.gp
set terminal pngcairo size 760,640
set output out
set datafile separator ","
set title "Predicted against measured step time: 4 runs x 38 configurations (netlab on 2 CPUs)"
set xlabel "measured ms/step"; set ylabel "predicted ms/step"; set key bottom right
set logscale xy
set xrange [8:200]; set yrange [8:200]
f(x) = x

plot "< grep ',1x1,' ".csv using 7:8 title "1 rank" pt 7 lc rgb "black", \
     "< grep ',2x1,' ".csv using 7:8 title "2 nodes x 1 rank" pt 5 lc rgb "#1b9e77", \
     "< grep ',3x1,' ".csv using 7:8 title "3 nodes x 1 (2 ranks on a CPU)" pt 9 lc rgb "#d95f02", \
     "< grep ',4x1,' ".csv using 7:8 title "4 nodes x 1 (2 ranks on a CPU)" pt 11 lc rgb "#7570b3", \
     "< grep ',2x2,' ".csv using 7:8 title "2 nodes x 2 (2 ranks on a CPU)" pt 13 lc rgb "#e7298a", \
     "< grep ',3x1,\\|,4x1,\\|,2x2,' ".csv using 7:12 title "the same, without turns (a CPU per rank)" pt 6 ps 0.8 lc rgb "gray50", \
     f(x) title "predicted = measured" lt -1, 1.25*x title "x 1.25, / 1.25" dt 2 lc rgb "gray", x/1.25 notitle dt 2 lc rgb "gray"
